// Streams: ids, in-order execution, query/sync, concurrency between streams,
// worker init, destroy.
#include <atomic>
#include <set>
#include <thread>

#include "support.hpp"

using nrt_test::Gate;
using Streams = nrt_test::RuntimeTest;

TEST_F(Streams, DefaultAndCreatedIds) {
  nrtStream_t d0 = nrt_test::default_stream(0);
  nrtStream_t d1 = nrt_test::default_stream(1);
  EXPECT_NE(d0, d1);
  EXPECT_EQ(nrt_test::default_stream(0), d0);  // stable
  EXPECT_EQ(nrtStreamGetId(d0), 0);
  EXPECT_EQ(nrtStreamGetId(d1), 0);
  EXPECT_EQ(nrtStreamGetDeviceIndex(d1), 1);
  nrtStream_t a = nrt_test::new_stream(1);
  nrtStream_t b = nrt_test::new_stream(1);
  EXPECT_GE(nrtStreamGetId(a), 1);
  EXPECT_EQ(nrtStreamGetId(b), nrtStreamGetId(a) + 1);
  EXPECT_EQ(nrtStreamGetDeviceIndex(a), 1);
  EXPECT_EQ(nrtStreamDestroy(a), nrtSuccess);
  EXPECT_EQ(nrtStreamDestroy(b), nrtSuccess);
}

TEST_F(Streams, QueuedWorkIsCounted) {
  nrtStream_t s = nrt_test::default_stream(0);
  const uint64_t before = neuronrt::queued_work_count();
  for (int i = 0; i < 3; ++i) neuronrt::launch(s, "count", [] {});
  int src = 1, dst = 0;
  ASSERT_EQ(nrtMemcpyAsync(&dst, &src, sizeof(int), nrtMemcpyHostToHost, s), nrtSuccess);
  neuronrt::synchronize(s);
  EXPECT_EQ(dst, 1);
  // Other tests' streams may run meanwhile in this process only if they run
  // concurrently, which gtest does not do.
  EXPECT_EQ(neuronrt::queued_work_count() - before, 4u);
}

TEST_F(Streams, InOrderExecution) {
  nrtStream_t s = nrt_test::default_stream(0);
  std::vector<int> order;  // only touched by the worker until synchronize
  constexpr int kTasks = 5000;
  for (int i = 0; i < kTasks; ++i) {
    neuronrt::launch(s, "append", [&order, i] { order.push_back(i); });
  }
  neuronrt::synchronize(s);
  ASSERT_EQ(order.size(), static_cast<size_t>(kTasks));
  for (int i = 0; i < kTasks; ++i) ASSERT_EQ(order[i], i);
}

TEST_F(Streams, ManySmallTasks) {
  nrtStream_t s = nrt_test::new_stream(0);
  std::atomic<int> count{0};
  constexpr int kTasks = 150000;  // past the queue limit: the host waits
  for (int i = 0; i < kTasks; ++i) {
    neuronrt::launch(s, "inc", [&count] { count.fetch_add(1, std::memory_order_relaxed); });
  }
  neuronrt::synchronize(s);
  EXPECT_EQ(count.load(), kTasks);
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Streams, QueryAndSynchronize) {
  nrtStream_t s = nrt_test::default_stream(0);
  EXPECT_EQ(nrtStreamQuery(s), nrtSuccess);
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  EXPECT_EQ(nrtStreamQuery(s), nrtErrorNotReady);
  gate.open();
  EXPECT_EQ(nrtStreamSynchronize(s), nrtSuccess);
  EXPECT_EQ(nrtStreamQuery(s), nrtSuccess);
}

TEST_F(Streams, StreamsRunConcurrently) {
  nrtStream_t a = nrt_test::new_stream(0);
  nrtStream_t b = nrt_test::new_stream(0);
  Gate gate;
  std::atomic<bool> a_saw_open{false};
  // a blocks until b's task opens the gate: only possible if both run at once.
  neuronrt::launch(a, "wait for b", [&] { a_saw_open = gate.wait(); });
  neuronrt::launch(b, "open", [&] { gate.open(); });
  neuronrt::synchronize(a);
  neuronrt::synchronize(b);
  EXPECT_TRUE(a_saw_open.load());
  EXPECT_EQ(nrtStreamDestroy(a), nrtSuccess);
  EXPECT_EQ(nrtStreamDestroy(b), nrtSuccess);
}

namespace {
std::atomic<int> g_init_calls{0};
std::atomic<int> g_init_device{-1};
thread_local bool t_initialized = false;
void count_init(int device) {
  g_init_calls.fetch_add(1);
  g_init_device = device;
  t_initialized = true;
}
}  // namespace

TEST_F(Streams, WorkerInitRunsOncePerWorker) {
  g_init_calls = 0;
  neuronrt::set_worker_init(count_init);
  nrtStream_t s = nrt_test::new_stream(1);
  std::atomic<bool> initialized_before_work{false};
  for (int i = 0; i < 10; ++i) {
    neuronrt::launch(s, "check", [&] { initialized_before_work = t_initialized; });
  }
  neuronrt::synchronize(s);
  EXPECT_EQ(g_init_calls.load(), 1);
  EXPECT_EQ(g_init_device.load(), 1);
  EXPECT_TRUE(initialized_before_work.load());
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
  neuronrt::set_worker_init(nullptr);
}

TEST_F(Streams, OnWorkerThread) {
  nrtStream_t s = nrt_test::default_stream(0);
  EXPECT_FALSE(neuronrt::on_worker_thread());
  std::atomic<bool> inside{false};
  neuronrt::launch(s, "probe", [&] { inside = neuronrt::on_worker_thread(); });
  neuronrt::synchronize(s);
  EXPECT_TRUE(inside.load());
}

TEST_F(Streams, DestroyDrainsQueuedWork) {
  nrtStream_t s = nrt_test::new_stream(0);
  std::atomic<int> done{0};
  for (int i = 0; i < 3; ++i) {
    neuronrt::launch(s, "slow", [&done] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ++done;
    });
  }
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
  EXPECT_EQ(done.load(), 3);
  // The handle is dead now.
  EXPECT_EQ(nrtStreamSynchronize(s), nrtErrorInvalidHandle);
  EXPECT_EQ(nrtStreamGetId(s), -1);
  EXPECT_THROW(neuronrt::launch(s, "x", [] {}), neuronrt::Error);
  EXPECT_EQ(nrtStreamDestroy(nrt_test::default_stream(0)), nrtErrorInvalidValue);
}

TEST_F(Streams, NeverUsedStreamDestroys) {
  nrtStream_t s = nrt_test::new_stream(1);
  EXPECT_EQ(nrtStreamSynchronize(s), nrtSuccess);
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Streams, SynchronizingOwnStreamFromItsWorkIsRefused) {
  nrtStream_t s = nrt_test::default_stream(0);
  std::atomic<int> st{-1}, dev_st{-1};
  neuronrt::launch(s, "self sync", [&] {
    st = nrtStreamSynchronize(s);
    dev_st = nrtDeviceSynchronize(0);
  });
  neuronrt::synchronize(s);
  EXPECT_EQ(st.load(), nrtErrorInvalidValue);
  EXPECT_EQ(dev_st.load(), nrtErrorInvalidValue);
}

TEST_F(Streams, NestedLaunchFromWork) {
  nrtStream_t s = nrt_test::default_stream(0);
  std::vector<int> order;
  neuronrt::launch(s, "outer", [&order, s] {
    order.push_back(1);
    neuronrt::launch(s, "inner", [&order] { order.push_back(3); });
    order.push_back(2);
  });
  neuronrt::synchronize(s);
  neuronrt::synchronize(s);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

namespace {
int add_to(void* user, char*, size_t) {
  *static_cast<int*>(user) += 5;
  return 0;
}
}  // namespace

TEST_F(Streams, HostFunction) {
  nrtStream_t s = nrt_test::default_stream(1);
  int value = 1;
  ASSERT_EQ(nrtLaunchHostFunc(s, add_to, &value, "add"), nrtSuccess);
  ASSERT_EQ(nrtLaunchHostFunc(s, add_to, &value, nullptr), nrtSuccess);
  ASSERT_EQ(nrtStreamSynchronize(s), nrtSuccess);
  EXPECT_EQ(value, 11);
  EXPECT_EQ(nrtLaunchHostFunc(s, nullptr, nullptr, "null"), nrtErrorInvalidValue);
}

TEST_F(Streams, DeviceSynchronizeWaitsForAllStreams) {
  nrtStream_t a = nrt_test::new_stream(0);
  std::atomic<int> done{0};
  auto slow = [&done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ++done;
  };
  neuronrt::launch(a, "slow", slow);
  neuronrt::launch(nrt_test::default_stream(0), "slow", slow);
  neuronrt::synchronize_device(0);
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(nrtStreamDestroy(a), nrtSuccess);
}

namespace {

// Appends its id, then the ids of the work it joined, to a log; accepts work
// of its kind up to `capacity` ids.
class Appends final : public neuronrt::JoinableWork {
 public:
  Appends(std::vector<int>* log, int id, size_t capacity = 8) : log_(log), ids_{id}, capacity_(capacity) {}
  void run() override { log_->insert(log_->end(), ids_.begin(), ids_.end()); }
  bool join(neuronrt::JoinableWork& next) override {
    auto* other = dynamic_cast<Appends*>(&next);
    if (!other || ids_.size() + other->ids_.size() > capacity_) return false;
    ids_.insert(ids_.end(), other->ids_.begin(), other->ids_.end());
    return true;
  }

 private:
  std::vector<int>* log_;
  std::vector<int> ids_;
  size_t capacity_;
};

std::unique_ptr<Appends> appends(std::vector<int>* log, int id, size_t capacity = 8) {
  return std::make_unique<Appends>(log, id, capacity);
}

}  // namespace

TEST_F(Streams, JoinableWorkJoinsOnlyTheLastQueuedTask) {
  nrtStream_t s = nrt_test::new_stream(0);
  std::vector<int> log;  // only touched by the worker until synchronize
  Gate started, release;
  neuronrt::launch(s, "hold", [&] {
    started.open();
    release.wait();
  });
  ASSERT_TRUE(started.wait());  // the worker is busy: what follows waits in the queue
  EXPECT_FALSE(neuronrt::launch_joinable(s, "a", appends(&log, 1)));
  EXPECT_TRUE(neuronrt::launch_joinable(s, "b", appends(&log, 2)));
  EXPECT_TRUE(neuronrt::launch_joinable(s, "c", appends(&log, 3)));
  neuronrt::launch(s, "plain", [&log] { log.push_back(100); });
  EXPECT_FALSE(neuronrt::launch_joinable(s, "d", appends(&log, 4, /*capacity=*/1)));  // behind other work
  EXPECT_FALSE(neuronrt::launch_joinable(s, "e", appends(&log, 5)));  // d refuses it
  nrtEvent_t ev = nullptr;
  ASSERT_EQ(nrtEventCreate(&ev, nrtEventDisableTiming), nrtSuccess);
  ASSERT_EQ(nrtEventRecord(ev, s), nrtSuccess);
  EXPECT_FALSE(neuronrt::launch_joinable(s, "f", appends(&log, 6)));  // behind a marker
  release.open();
  neuronrt::synchronize(s);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3, 100, 4, 5, 6}));
  EXPECT_EQ(nrtEventQuery(ev), nrtSuccess);
  EXPECT_EQ(nrtEventDestroy(ev), nrtSuccess);
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Streams, JoinableWorkQueuedLastWaitsForTheNextBatch) {
  // The worker takes queued tasks in batches; joinable work at the end of the
  // queue is left for the next one, so work queued while the batch runs
  // still joins it.
  nrtStream_t s = nrt_test::new_stream(0);
  std::vector<int> log;
  Gate started, release, second_started, second_release;
  neuronrt::launch(s, "hold", [&] {
    started.open();
    release.wait();
  });
  ASSERT_TRUE(started.wait());
  neuronrt::launch(s, "hold again", [&] {
    second_started.open();
    second_release.wait();
  });
  EXPECT_FALSE(neuronrt::launch_joinable(s, "a", appends(&log, 1)));
  release.open();
  ASSERT_TRUE(second_started.wait());  // its batch has started
  EXPECT_TRUE(neuronrt::launch_joinable(s, "b", appends(&log, 2)));
  second_release.open();
  neuronrt::synchronize(s);
  EXPECT_EQ(log, (std::vector<int>{1, 2}));
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Streams, JoinableWorkNeverJoinsStartedWork) {
  nrtStream_t s = nrt_test::new_stream(0);
  std::vector<int> log;
  Gate started, release;
  class Holds final : public neuronrt::JoinableWork {
   public:
    Holds(Gate* started, Gate* release) : started_(started), release_(release) {}
    void run() override {
      started_->open();
      release_->wait();
    }
    bool join(neuronrt::JoinableWork&) override { return true; }  // would take anything

   private:
    Gate* started_;
    Gate* release_;
  };
  EXPECT_FALSE(neuronrt::launch_joinable(s, "hold", std::make_unique<Holds>(&started, &release)));
  ASSERT_TRUE(started.wait());
  EXPECT_FALSE(neuronrt::launch_joinable(s, "a", appends(&log, 1)));  // runs after it, on its own
  release.open();
  neuronrt::synchronize(s);
  EXPECT_EQ(log, std::vector<int>{1});
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Streams, JoinableWorkFailureIsReportedAndItsQueueSkipped) {
  nrtStream_t s = nrt_test::new_stream(0);
  class Throws final : public neuronrt::JoinableWork {
   public:
    void run() override { throw std::runtime_error("step 2 of 2 failed"); }
    bool join(neuronrt::JoinableWork&) override { return false; }
  };
  std::vector<int> log;
  Gate started, release;
  neuronrt::launch(s, "hold", [&] {
    started.open();
    release.wait();
  });
  ASSERT_TRUE(started.wait());
  neuronrt::launch_joinable(s, "throws", std::make_unique<Throws>());
  neuronrt::launch_joinable(s, "after", appends(&log, 1));
  release.open();
  try {
    neuronrt::synchronize(s);
    FAIL() << "expected the failure";
  } catch (const neuronrt::AsyncError& e) {
    EXPECT_EQ(e.op_name(), "throws");
    EXPECT_NE(std::string(e.what()).find("step 2 of 2 failed"), std::string::npos);
  }
  EXPECT_TRUE(log.empty());  // queued behind the failure: skipped
  neuronrt::launch_joinable(s, "later", appends(&log, 2));
  neuronrt::synchronize(s);
  EXPECT_EQ(log, std::vector<int>{2});
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}
