// The kernels' compute threads: every index runs exactly once, errors come
// back to the caller, nested and concurrent calls stay correct, and jobs in
// quick succession (helpers spinning, sleeping, waking late) never mix.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "neuronrt/neuronrt.hpp"

namespace {

// Runs parallel_for over n and checks that every index was visited once.
void expect_each_index_once(int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  neuronrt::parallel_for(n, [&](int64_t begin, int64_t end) {
    ASSERT_LE(0, begin);
    ASSERT_LT(begin, end);
    ASSERT_LE(end, n);
    for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "index " << i << " of " << n;
}

TEST(ComputePool, EveryIndexRunsOnce) {
  EXPECT_GE(neuronrt::kernel_threads(), 1);
  for (int64_t n : {1, 2, 3, 7, 64, 1000, 100003}) expect_each_index_once(n);
}

TEST(ComputePool, NothingToDo) {
  bool called = false;
  neuronrt::parallel_for(0, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ComputePool, ManyJobsInQuickSuccession) {
  // Helpers alternate between spinning, sleeping and waking late for a job
  // that has already finished; none may run a chunk of the wrong job.
  for (int job = 0; job < 20000; ++job) {
    const int64_t n = 1 + job % 9;
    std::atomic<int64_t> sum{0};
    neuronrt::parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i + job);
    });
    ASSERT_EQ(sum.load(), n * (n - 1) / 2 + n * job) << "job " << job;
    if (job % 5000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // helpers sleep
  }
}

TEST(ComputePool, ExceptionsReachTheCallerAndThePoolKeepsWorking) {
  std::atomic<int> ran{0};
  EXPECT_THROW(neuronrt::parallel_for(64, [&](int64_t b, int64_t e) {
                 ran.fetch_add(static_cast<int>(e - b));
                 if (b == 0) throw std::runtime_error("chunk failed");
               }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 64);  // the other chunks still ran: the caller waited for them
  expect_each_index_once(500);
}

TEST(ComputePool, NestedCallsRunSerially) {
  std::atomic<int64_t> total{0};
  neuronrt::parallel_for(8, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      neuronrt::parallel_for(10, [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2); });
    }
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ComputePool, ConcurrentCallersEachGetTheirResult) {
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int job = 0; job < 500; ++job) {
        const int64_t n = 17 + t;
        std::atomic<int64_t> sum{0};
        neuronrt::parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
        });
        if (sum.load() != n * (n - 1) / 2) failures.fetch_add(1);
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
