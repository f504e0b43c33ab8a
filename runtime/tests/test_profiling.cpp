// Profiling: timestamps of queued work, kept only while profiling is on.
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <future>
#include <thread>

#include "support.hpp"

using nrt_test::Gate;
using Profiling = nrt_test::RuntimeTest;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Leaves no session open for the next test.
struct Session {
  Session() { neuronrt::profiling_start(); }
  ~Session() {
    neuronrt::profiling_stop();
    neuronrt::profiling_set_tags(0, 0);
    neuronrt::profiling_take_records();
  }
};

}  // namespace

TEST_F(Profiling, OffKeepsNothing) {
  ASSERT_FALSE(neuronrt::profiling_enabled());
  nrtStream_t s = nrt_test::default_stream(0);
  for (int i = 0; i < 100; ++i) neuronrt::launch(s, "op", [] {});
  neuronrt::synchronize(s);
  EXPECT_EQ(neuronrt::profiling_record_count(), 0u);
  EXPECT_TRUE(neuronrt::profiling_take_records().empty());
}

TEST_F(Profiling, RecordsNameTagsAndIntervalsInQueueOrder) {
  nrtStream_t s = nrt_test::default_stream(0);
  Session session;
  neuronrt::profiling_set_tags(7, 3);
  const int64_t before = neuronrt::profiling_now_ns();
  neuronrt::launch(s, "sleep", [] { sleep_ms(20); });
  neuronrt::profiling_set_tags(8, 0);
  neuronrt::launch(s, "after", [] {});
  char src[64] = "payload", dst[64] = {};
  ASSERT_EQ(nrtMemcpyAsync(dst, src, sizeof src, nrtMemcpyHostToHost, s), nrtSuccess);
  nrtEvent_t e = nullptr;
  ASSERT_EQ(nrtEventCreate(&e, nrtEventDefault), nrtSuccess);
  ASSERT_EQ(nrtEventRecord(e, s), nrtSuccess);  // a marker, not work: not recorded
  neuronrt::synchronize(s);
  const int64_t after = neuronrt::profiling_now_ns();
  neuronrt::profiling_stop();
  std::vector<neuronrt::TaskRecord> r = neuronrt::profiling_take_records();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].op_name, "sleep");
  EXPECT_EQ(r[1].op_name, "after");
  EXPECT_EQ(r[2].op_name, "memcpy HostToHost");
  EXPECT_EQ(r[0].tag, 7u);
  EXPECT_EQ(r[0].user_tag, 3u);
  EXPECT_EQ(r[1].tag, 8u);
  EXPECT_EQ(r[1].user_tag, 0u);
  const int32_t tid = static_cast<int32_t>(::syscall(SYS_gettid));
  for (const auto& rec : r) {
    EXPECT_FALSE(rec.on_host);
    EXPECT_EQ(rec.device, 0);
    EXPECT_EQ(rec.stream, 0);
    EXPECT_EQ(rec.host_thread, tid);
    EXPECT_LE(before, rec.enqueue_begin_ns);
    EXPECT_LE(rec.enqueue_begin_ns, rec.enqueue_end_ns);
    EXPECT_LE(rec.enqueue_end_ns, rec.start_ns);
    EXPECT_LE(rec.start_ns, rec.end_ns);
    EXPECT_LE(rec.end_ns, after);
  }
  EXPECT_GE(r[0].end_ns - r[0].start_ns, 19'000'000);  // the sleep is the work
  EXPECT_LE(r[0].end_ns, r[1].start_ns);               // in queue order
  EXPECT_LE(r[1].end_ns, r[2].start_ns);
  EXPECT_EQ(std::strcmp(dst, "payload"), 0);
  nrtEventDestroy(e);
}

TEST_F(Profiling, WorkOfAClosedSessionIsDropped) {
  nrtStream_t s = nrt_test::default_stream(0);
  Gate gate;
  {
    Session session;
    neuronrt::launch(s, "held", [&gate] { gate.wait(); });
    neuronrt::profiling_stop();
    EXPECT_TRUE(neuronrt::profiling_take_records().empty());  // not run yet
  }
  neuronrt::launch(s, "later", [] {});
  gate.open();
  neuronrt::synchronize(s);
  EXPECT_EQ(neuronrt::profiling_record_count(), 0u);
}

TEST_F(Profiling, StreamsOverlapAndKeepTheirIds) {
  nrtStream_t a = nrt_test::default_stream(0);
  nrtStream_t b = nrt_test::new_stream(0);
  {
    Session session;
    neuronrt::launch(a, "on a", [] { sleep_ms(30); });
    neuronrt::launch(b, "on b", [] { sleep_ms(30); });
    neuronrt::synchronize(a);
    neuronrt::synchronize(b);
    neuronrt::profiling_stop();
    std::vector<neuronrt::TaskRecord> r = neuronrt::profiling_take_records();
    ASSERT_EQ(r.size(), 2u);
    const auto& ra = r[0].op_name == "on a" ? r[0] : r[1];
    const auto& rb = r[0].op_name == "on a" ? r[1] : r[0];
    EXPECT_EQ(ra.stream, nrtStreamGetId(a));
    EXPECT_EQ(rb.stream, nrtStreamGetId(b));
    EXPECT_NE(ra.stream, rb.stream);
    // Each worker runs its own queue: the two sleeps overlap.
    EXPECT_LT(std::max(ra.start_ns, rb.start_ns), std::min(ra.end_ns, rb.end_ns));
  }
  ASSERT_EQ(nrtStreamDestroy(b), nrtSuccess);
}

TEST_F(Profiling, SkippedWorkIsNotRecorded) {
  nrtStream_t s = nrt_test::default_stream(0);
  Session session;
  // The failing task waits until the next one is queued: a failure that is
  // already known is raised by the next launch instead.
  std::promise<void> both_queued;
  std::shared_future<void> gate = both_queued.get_future().share();
  neuronrt::launch(s, "fails", [gate] {
    gate.wait();
    throw std::runtime_error("boom");
  });
  neuronrt::launch(s, "skipped", [] {});
  both_queued.set_value();
  EXPECT_THROW(neuronrt::synchronize(s), neuronrt::AsyncError);
  neuronrt::profiling_stop();
  std::vector<neuronrt::TaskRecord> r = neuronrt::profiling_take_records();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].op_name, "fails");
}

TEST_F(Profiling, HostWorkIsRecordedOnItsStream) {
  nrtStream_t s = nrt_test::new_stream(1);
  neuronrt::profiling_record_host_work(s, "off", neuronrt::profiling_now_ns());
  EXPECT_EQ(neuronrt::profiling_record_count(), 0u);
  {
    Session session;
    neuronrt::profiling_set_tags(5, 0);
    const int64_t start = neuronrt::profiling_now_ns();
    sleep_ms(5);
    neuronrt::profiling_record_host_work(s, "sync op", start);
    neuronrt::profiling_stop();
    std::vector<neuronrt::TaskRecord> r = neuronrt::profiling_take_records();
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].op_name, "sync op");
    EXPECT_TRUE(r[0].on_host);
    EXPECT_EQ(r[0].device, 1);
    EXPECT_EQ(r[0].stream, nrtStreamGetId(s));
    EXPECT_EQ(r[0].tag, 5u);
    EXPECT_EQ(r[0].start_ns, start);
    EXPECT_GE(r[0].end_ns - r[0].start_ns, 4'000'000);
  }
  ASSERT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Profiling, ATaskRecordsItsPartsBeforeItself) {
  nrtStream_t s = nrt_test::default_stream(0);
  EXPECT_FALSE(neuronrt::profiling_in_task());
  neuronrt::profiling_record_task_part("outside", 0, 1);  // not in a task: dropped
  bool in_task_off = true;
  neuronrt::launch(s, "unprofiled", [&] { in_task_off = neuronrt::profiling_in_task(); });
  neuronrt::synchronize(s);
  EXPECT_FALSE(in_task_off);  // profiling off: a task has no parts

  Session session;
  neuronrt::profiling_set_tags(5, 2);
  bool in_task = false;
  neuronrt::launch(s, "program", [&] {
    in_task = neuronrt::profiling_in_task();
    for (const char* name : {"step 0", "step 1"}) {
      const int64_t start = neuronrt::profiling_now_ns();
      sleep_ms(2);
      neuronrt::profiling_record_task_part(name, start, neuronrt::profiling_now_ns());
    }
  });
  neuronrt::launch(s, "next", [] {});
  neuronrt::synchronize(s);
  neuronrt::profiling_stop();
  EXPECT_TRUE(in_task);
  std::vector<neuronrt::TaskRecord> r = neuronrt::profiling_take_records();
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].op_name, "step 0");
  EXPECT_EQ(r[1].op_name, "step 1");
  EXPECT_EQ(r[2].op_name, "program");
  EXPECT_EQ(r[3].op_name, "next");
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(r[i].part);
    EXPECT_EQ(r[i].task, r[2].task);  // linked to their task, with its device, stream and tags
    EXPECT_EQ(r[i].device, r[2].device);
    EXPECT_EQ(r[i].stream, r[2].stream);
    EXPECT_EQ(r[i].tag, 5u);
    EXPECT_EQ(r[i].user_tag, 2u);
    EXPECT_LE(r[2].start_ns, r[i].start_ns);  // inside the task's interval
    EXPECT_LE(r[i].end_ns, r[2].end_ns);
    EXPECT_GE(r[i].end_ns - r[i].start_ns, 1'900'000);
  }
  EXPECT_LE(r[0].end_ns, r[1].start_ns);
  EXPECT_FALSE(r[2].part);
  EXPECT_FALSE(r[3].part);
  EXPECT_NE(r[2].task, 0u);
  EXPECT_NE(r[2].task, r[3].task);
}

TEST_F(Profiling, JoinableWorkRunsOnItsOwnWhileProfiling) {
  // Each launch keeps its own interval: joining would hide the second op's
  // time inside the first one's.
  class Joins final : public neuronrt::JoinableWork {
   public:
    void run() override {}
    bool join(neuronrt::JoinableWork&) override { return true; }
  };
  nrtStream_t s = nrt_test::new_stream(0);
  nrt_test::Gate started, release;
  Session session;
  neuronrt::launch(s, "hold", [&] {
    started.open();
    release.wait();
  });
  ASSERT_TRUE(started.wait());
  EXPECT_FALSE(neuronrt::launch_joinable(s, "first", std::make_unique<Joins>()));
  EXPECT_FALSE(neuronrt::launch_joinable(s, "second", std::make_unique<Joins>()));
  release.open();
  neuronrt::synchronize(s);
  std::vector<std::string> names;
  for (const auto& r : neuronrt::profiling_take_records()) names.push_back(r.op_name);
  EXPECT_EQ(names, (std::vector<std::string>{"hold", "first", "second"}));
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}
