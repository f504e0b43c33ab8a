// Async failures: the first-error slot, skipping, reporting, clearing,
// NEURON_LAUNCH_BLOCKING and invalid handles.
#include <atomic>
#include <thread>

#include "support.hpp"

using nrt_test::Gate;
using nrt_test::ScopedEnv;
using Errors = nrt_test::RuntimeTest;

namespace {

int noop(void*, char*, size_t) { return 0; }

int fail_with_message(void*, char* message, size_t size) {
  std::snprintf(message, size, "bad input");
  return 3;
}

int fail_silently(void*, char*, size_t) { return 4; }

// Waits until the stream has run everything, without consuming its failure.
void wait_idle(nrtStream_t s) {
  while (nrtStreamQuery(s) == nrtErrorNotReady) std::this_thread::yield();
}

}  // namespace

TEST_F(Errors, NextLaunchThrowsAsyncErrorThenStreamRecovers) {
  nrtStream_t s = nrt_test::default_stream(0);
  neuronrt::launch(s, "my_op", [] { throw std::runtime_error("boom"); });
  wait_idle(s);
  try {
    neuronrt::launch(s, "next", [] {});
    FAIL() << "expected AsyncError";
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_EQ(e.op_name(), "my_op");
    EXPECT_EQ(e.status(), nrtErrorLaunchFailure);
    EXPECT_STREQ(e.what(), "my_op failed on neuron:0: boom");
    ASSERT_TRUE(e.original());
    try {
      std::rethrow_exception(e.original());
    } catch (const std::runtime_error& original) {
      EXPECT_STREQ(original.what(), "boom");
    }
  }
  // The slot is clear and the stream works again.
  std::atomic<bool> ran{false};
  neuronrt::launch(s, "works", [&ran] { ran = true; });
  EXPECT_NO_THROW(neuronrt::synchronize(s));
  EXPECT_TRUE(ran.load());
}

TEST_F(Errors, SynchronizeThrowsOnceOnAnotherDevice) {
  nrtStream_t s = nrt_test::default_stream(1);
  neuronrt::launch(s, "kernel", [] { throw std::logic_error("shape mismatch"); });
  try {
    neuronrt::synchronize(s);
    FAIL();
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_EQ(e.op_name(), "kernel");
    EXPECT_STREQ(e.what(), "kernel failed on neuron:1: shape mismatch");
  }
  EXPECT_NO_THROW(neuronrt::synchronize(s));
}

TEST_F(Errors, WorkQueuedBehindFailureIsSkipped) {
  nrtStream_t s = nrt_test::new_stream(0);
  Gate gate;
  std::atomic<int> count{0};
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  neuronrt::launch(s, "fails", [] { throw std::runtime_error("x"); });
  for (int i = 0; i < 10; ++i) neuronrt::launch(s, "count", [&count] { ++count; });
  gate.open();
  EXPECT_THROW(neuronrt::synchronize(s), neuronrt::AsyncError);
  EXPECT_EQ(count.load(), 0);
  neuronrt::launch(s, "count", [&count] { ++count; });
  neuronrt::synchronize(s);
  EXPECT_EQ(count.load(), 1);
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Errors, WorkQueuedBeforeReportIsSkippedEvenIfItRunsLater) {
  // Stream a fails, then waits on b's event: the failure is reported while
  // a's later work is still queued. That work must still be skipped.
  nrtStream_t a = nrt_test::new_stream(0);
  nrtStream_t b = nrt_test::new_stream(0);
  Gate gate;
  neuronrt::launch(b, "hold", [&gate] { gate.wait(); });
  neuronrt::Event e;
  e.record(b);
  std::atomic<int> count{0};
  Gate start;
  neuronrt::launch(a, "hold", [&start] { start.wait(); });
  neuronrt::launch(a, "fails", [] { throw std::runtime_error("x"); });
  ASSERT_EQ(nrtStreamWaitEvent(a, e.get()), nrtSuccess);
  neuronrt::launch(a, "count", [&count] { ++count; });
  start.open();
  // Report the failure (launches queued before it are skipped too).
  nrtStatus st;
  while ((st = nrtLaunchHostFunc(a, noop, nullptr, "probe")) == nrtSuccess) {
    std::this_thread::yield();
  }
  EXPECT_EQ(st, nrtErrorLaunchFailure);
  gate.open();
  EXPECT_EQ(nrtStreamSynchronize(a), nrtSuccess);
  EXPECT_EQ(count.load(), 0);
  neuronrt::launch(a, "count", [&count] { ++count; });
  neuronrt::synchronize(a);
  EXPECT_EQ(count.load(), 1);
  neuronrt::synchronize(b);
  nrtStreamDestroy(a);
  nrtStreamDestroy(b);
}

TEST_F(Errors, HostFunctionFailureMessage) {
  nrtStream_t s = nrt_test::default_stream(0);
  ASSERT_EQ(nrtLaunchHostFunc(s, fail_with_message, nullptr, "hostop"), nrtSuccess);
  EXPECT_EQ(nrtStreamSynchronize(s), nrtErrorLaunchFailure);
  EXPECT_STREQ(nrtGetLastErrorMessage(), "hostop failed on neuron:0: bad input");
  EXPECT_EQ(nrtStreamSynchronize(s), nrtSuccess);

  ASSERT_EQ(nrtLaunchHostFunc(s, fail_silently, nullptr, "quiet"), nrtSuccess);
  try {
    neuronrt::synchronize(s);
    FAIL();
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_EQ(e.op_name(), "quiet");
    EXPECT_STREQ(e.what(), "quiet failed on neuron:0: host function returned 4");
  }
}

TEST_F(Errors, CheckTurnsLaunchFailureIntoAsyncError) {
  nrtStream_t s = nrt_test::default_stream(0);
  ASSERT_EQ(nrtLaunchHostFunc(s, fail_with_message, nullptr, "c_op"), nrtSuccess);
  const nrtStatus st = nrtStreamSynchronize(s);
  try {
    neuronrt::check(st);
    FAIL();
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_EQ(e.op_name(), "c_op");
    EXPECT_STREQ(e.what(), "c_op failed on neuron:0: bad input");
  }
}

TEST_F(Errors, UnknownExceptionType) {
  nrtStream_t s = nrt_test::default_stream(0);
  neuronrt::launch(s, "weird", [] { throw 42; });
  try {
    neuronrt::synchronize(s);
    FAIL();
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_STREQ(e.what(), "weird failed on neuron:0: unknown exception");
    EXPECT_THROW(std::rethrow_exception(e.original()), int);
  }
}

TEST_F(Errors, DeviceSynchronizeReportsFirstAndClearsAll) {
  nrtStream_t a = nrt_test::new_stream(0);
  nrtStream_t d = nrt_test::default_stream(0);
  neuronrt::launch(a, "op_a", [] { throw std::runtime_error("a"); });
  neuronrt::launch(d, "op_d", [] { throw std::runtime_error("d"); });
  EXPECT_EQ(nrtDeviceSynchronize(0), nrtErrorLaunchFailure);
  EXPECT_NE(std::string(nrtGetLastErrorMessage()).find("failed on neuron:0"), std::string::npos);
  EXPECT_EQ(nrtDeviceSynchronize(0), nrtSuccess);
  EXPECT_NO_THROW(neuronrt::synchronize(a));
  EXPECT_NO_THROW(neuronrt::synchronize(d));
  EXPECT_NO_THROW(neuronrt::synchronize_device(0));
  nrtStreamDestroy(a);
}

TEST_F(Errors, LaunchBlockingReportsImmediately) {
  ScopedEnv env{{"NEURON_LAUNCH_BLOCKING", "1"}};
  ASSERT_TRUE(neuronrt::launch_blocking());
  nrtStream_t s = nrt_test::default_stream(0);
  std::atomic<bool> done{false};
  neuronrt::launch(s, "slow", [&done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done = true;
  });
  EXPECT_TRUE(done.load());  // launch waited for it
  try {
    neuronrt::launch(s, "bad_op", [] { throw std::runtime_error("now"); });
    FAIL() << "launch should report the failure at once";
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_EQ(e.op_name(), "bad_op");
    EXPECT_STREQ(e.what(), "bad_op failed on neuron:0: now");
  }
  EXPECT_EQ(nrtLaunchHostFunc(s, fail_with_message, nullptr, "c_bad"), nrtErrorLaunchFailure);
  EXPECT_STREQ(nrtGetLastErrorMessage(), "c_bad failed on neuron:0: bad input");
  EXPECT_NO_THROW(neuronrt::launch(s, "fine", [] {}));
  EXPECT_NO_THROW(neuronrt::synchronize(s));
}

TEST_F(Errors, InvalidStreamHandles) {
  try {
    neuronrt::launch(nullptr, "x", [] {});
    FAIL();
  } catch (const neuronrt::Error& e) {
    EXPECT_EQ(e.status(), nrtErrorInvalidHandle);
  }
  EXPECT_EQ(nrtStreamSynchronize(nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtStreamQuery(nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtStreamDestroy(nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtStreamGetId(nullptr), -1);
  EXPECT_EQ(nrtStreamGetDeviceIndex(nullptr), -1);
  EXPECT_EQ(nrtLaunchHostFunc(nullptr, noop, nullptr, "x"), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtStreamGetDefault(nullptr, 0), nrtErrorInvalidValue);
  EXPECT_EQ(nrtStreamCreate(nullptr, 0, 0), nrtErrorInvalidValue);
  nrtStream_t s = nrt_test::default_stream(0);
  EXPECT_THROW(neuronrt::launch(s, "empty", std::function<void()>()), neuronrt::Error);
}
