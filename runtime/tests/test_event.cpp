// Events: record/query/synchronize, timing, cross-stream waits.
#include <atomic>
#include <thread>

#include "support.hpp"

using nrt_test::Gate;
using Events = nrt_test::RuntimeTest;

namespace {
nrtEvent_t make_event(unsigned flags = nrtEventDefault) {
  nrtEvent_t e = nullptr;
  neuronrt::check(nrtEventCreate(&e, flags));
  return e;
}
}  // namespace

TEST_F(Events, RecordQuerySynchronize) {
  nrtStream_t s = nrt_test::default_stream(0);
  nrtEvent_t e = make_event();
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  ASSERT_EQ(nrtEventRecord(e, s), nrtSuccess);
  EXPECT_EQ(nrtEventQuery(e), nrtErrorNotReady);
  gate.open();
  EXPECT_EQ(nrtEventSynchronize(e), nrtSuccess);
  EXPECT_EQ(nrtEventQuery(e), nrtSuccess);
  EXPECT_EQ(nrtEventDestroy(e), nrtSuccess);
}

TEST_F(Events, NeverRecordedIsCompleteAndWaitIsNoOp) {
  nrtEvent_t e = make_event();
  EXPECT_EQ(nrtEventQuery(e), nrtSuccess);
  EXPECT_EQ(nrtEventSynchronize(e), nrtSuccess);
  nrtStream_t s = nrt_test::default_stream(0);
  EXPECT_EQ(nrtStreamWaitEvent(s, e), nrtSuccess);
  std::atomic<bool> ran{false};
  neuronrt::launch(s, "after", [&ran] { ran = true; });
  neuronrt::synchronize(s);
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(nrtEventDestroy(e), nrtSuccess);
}

TEST_F(Events, ElapsedTimeOfSleepingTask) {
  nrtStream_t s = nrt_test::default_stream(0);
  nrtEvent_t start = make_event(), end = make_event();
  ASSERT_EQ(nrtEventRecord(start, s), nrtSuccess);
  neuronrt::launch(s, "sleep", [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
  ASSERT_EQ(nrtEventRecord(end, s), nrtSuccess);
  ASSERT_EQ(nrtEventSynchronize(end), nrtSuccess);
  float ms = -1;
  ASSERT_EQ(nrtEventElapsedTime(&ms, start, end), nrtSuccess);
  EXPECT_GE(ms, 49.0f);
  EXPECT_LT(ms, 5000.0f);
  ASSERT_EQ(nrtEventElapsedTime(&ms, start, start), nrtSuccess);
  EXPECT_EQ(ms, 0.0f);
  nrtEventDestroy(start);
  nrtEventDestroy(end);
}

TEST_F(Events, ElapsedTimeErrors) {
  nrtStream_t s = nrt_test::default_stream(0);
  nrtEvent_t timed = make_event(), untimed = make_event(nrtEventDisableTiming);
  nrtEvent_t never = make_event();
  ASSERT_EQ(nrtEventRecord(timed, s), nrtSuccess);
  ASSERT_EQ(nrtEventRecord(untimed, s), nrtSuccess);
  neuronrt::synchronize(s);
  float ms = 0;
  EXPECT_EQ(nrtEventElapsedTime(&ms, timed, untimed), nrtErrorInvalidValue);
  EXPECT_NE(std::string(nrtGetLastErrorMessage()).find("nrtEventDisableTiming"),
            std::string::npos);
  EXPECT_EQ(nrtEventElapsedTime(&ms, timed, never), nrtErrorInvalidValue);
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  nrtEvent_t pending = make_event();
  ASSERT_EQ(nrtEventRecord(pending, s), nrtSuccess);
  EXPECT_EQ(nrtEventElapsedTime(&ms, timed, pending), nrtErrorNotReady);
  gate.open();
  neuronrt::synchronize(s);
  EXPECT_EQ(nrtEventElapsedTime(&ms, timed, pending), nrtSuccess);
  EXPECT_GE(ms, 0.0f);
  for (nrtEvent_t e : {timed, untimed, never, pending}) nrtEventDestroy(e);
}

TEST_F(Events, StreamWaitEventOrdersAcrossStreams) {
  nrtStream_t a = nrt_test::new_stream(0);
  nrtStream_t b = nrt_test::new_stream(0);
  nrtEvent_t e = make_event(nrtEventDisableTiming);
  std::atomic<int> x{0};
  std::atomic<int> seen{-1};
  neuronrt::launch(a, "produce", [&x] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    x = 1;
  });
  ASSERT_EQ(nrtEventRecord(e, a), nrtSuccess);
  ASSERT_EQ(nrtStreamWaitEvent(b, e), nrtSuccess);
  neuronrt::launch(b, "consume", [&] { seen = x.load(); });
  neuronrt::synchronize(b);
  EXPECT_EQ(seen.load(), 1);
  neuronrt::synchronize(a);
  nrtEventDestroy(e);
  nrtStreamDestroy(a);
  nrtStreamDestroy(b);
}

TEST_F(Events, CrossDeviceWait) {
  nrtStream_t a = nrt_test::default_stream(0);
  nrtStream_t b = nrt_test::default_stream(1);
  nrtEvent_t e = make_event();
  std::atomic<int> x{0}, seen{-1};
  neuronrt::launch(a, "produce", [&x] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    x = 7;
  });
  ASSERT_EQ(nrtEventRecord(e, a), nrtSuccess);
  ASSERT_EQ(nrtStreamWaitEvent(b, e), nrtSuccess);
  neuronrt::launch(b, "consume", [&] { seen = x.load(); });
  neuronrt::synchronize(b);
  EXPECT_EQ(seen.load(), 7);
  nrtEventDestroy(e);
}

TEST_F(Events, ReRecordTracksLatestCapture) {
  nrtStream_t s = nrt_test::default_stream(0);
  nrtEvent_t e = make_event();
  ASSERT_EQ(nrtEventRecord(e, s), nrtSuccess);
  neuronrt::synchronize(s);
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  ASSERT_EQ(nrtEventRecord(e, s), nrtSuccess);
  EXPECT_EQ(nrtEventQuery(e), nrtErrorNotReady);
  gate.open();
  ASSERT_EQ(nrtEventSynchronize(e), nrtSuccess);
  EXPECT_EQ(nrtEventQuery(e), nrtSuccess);
  nrtEventDestroy(e);
}

TEST_F(Events, DestroyWithPendingMarker) {
  nrtStream_t s = nrt_test::default_stream(0);
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  nrtEvent_t e = make_event();
  ASSERT_EQ(nrtEventRecord(e, s), nrtSuccess);
  nrtStream_t b = nrt_test::default_stream(1);
  ASSERT_EQ(nrtStreamWaitEvent(b, e), nrtSuccess);
  ASSERT_EQ(nrtEventDestroy(e), nrtSuccess);  // marker and wait keep it alive
  gate.open();
  neuronrt::synchronize(s);
  neuronrt::synchronize(b);
}

TEST_F(Events, MarkersCompleteOnFailedStream) {
  nrtStream_t s = nrt_test::default_stream(0);
  neuronrt::launch(s, "fails", [] { throw std::runtime_error("boom"); });
  nrtEvent_t e = make_event();
  ASSERT_EQ(nrtEventRecord(e, s), nrtSuccess);
  EXPECT_EQ(nrtEventSynchronize(e), nrtSuccess);  // does not hang
  EXPECT_EQ(nrtEventQuery(e), nrtSuccess);
  EXPECT_THROW(neuronrt::synchronize(s), neuronrt::AsyncError);
  nrtEventDestroy(e);
}

TEST_F(Events, RaiiEvent) {
  nrtStream_t s = nrt_test::default_stream(0);
  neuronrt::Event e;
  EXPECT_TRUE(e.query());
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  e.record(s);
  EXPECT_FALSE(e.query());
  gate.open();
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST_F(Events, BadHandlesAndFlags) {
  nrtEvent_t e = nullptr;
  EXPECT_EQ(nrtEventCreate(&e, 0x10), nrtErrorInvalidValue);
  EXPECT_EQ(nrtEventCreate(nullptr, 0), nrtErrorInvalidValue);
  EXPECT_EQ(nrtEventQuery(nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtEventSynchronize(nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtEventDestroy(nullptr), nrtErrorInvalidHandle);
  e = make_event();
  EXPECT_EQ(nrtEventRecord(e, nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtStreamWaitEvent(nullptr, e), nrtErrorInvalidHandle);
  float ms;
  EXPECT_EQ(nrtEventElapsedTime(&ms, e, nullptr), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtEventElapsedTime(nullptr, e, e), nrtErrorInvalidValue);
  nrtEventDestroy(e);
}
