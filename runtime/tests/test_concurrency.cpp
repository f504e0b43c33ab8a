// Several host threads launching, recording and allocating at once.
#include <atomic>
#include <thread>

#include "support.hpp"

using Concurrency = nrt_test::RuntimeTest;

TEST_F(Concurrency, ManyThreadsOneStreamKeepPerThreadOrder) {
  nrtStream_t s = nrt_test::default_stream(0);
  constexpr int kThreads = 4, kTasks = 2000;
  std::vector<std::vector<int>> seen(kThreads);  // written by the worker only
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) {
        neuronrt::launch(s, "append", [&seen, t, i] { seen[t].push_back(i); });
      }
    });
  }
  for (auto& th : threads) th.join();
  neuronrt::synchronize(s);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(seen[t].size(), static_cast<size_t>(kTasks));
    for (int i = 0; i < kTasks; ++i) ASSERT_EQ(seen[t][i], i);
  }
}

TEST_F(Concurrency, ThreadsWithOwnStreamsEventsAndMemory) {
  constexpr int kThreads = 4, kRounds = 200;
  std::atomic<long> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const int device = t % 2;
      nrtStream_t s = nrt_test::new_stream(device);
      nrtStream_t d = nrt_test::default_stream(device);
      neuronrt::Event e(nrtEventDisableTiming);
      auto& alloc = neuronrt::CachingAllocator::get();
      for (int i = 0; i < kRounds; ++i) {
        void* p = alloc.allocate(256 + static_cast<size_t>(i), device, s);
        neuronrt::launch(s, "write", [p, i] { static_cast<int*>(p)[0] = i; });
        e.record(s);
        neuronrt::check(nrtStreamWaitEvent(d, e.get()));
        alloc.record_stream(p, d);
        neuronrt::launch(d, "read", [p, i, &total] {
          if (static_cast<int*>(p)[0] == i) total.fetch_add(1);
        });
        alloc.free(p);
      }
      neuronrt::synchronize(s);
      neuronrt::synchronize(d);
      neuronrt::check(nrtStreamDestroy(s));
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(total.load(), kThreads * kRounds);
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(neuronrt::CachingAllocator::get().stats(d).all.allocation.current, 0);
  }
}

TEST_F(Concurrency, RawMallocFromManyThreads) {
  constexpr int kThreads = 4, kIters = 500;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        void* p = nullptr;
        if (nrtMalloc(&p, 64 + static_cast<size_t>(i), t % 2) != nrtSuccess) ++failures;
        int dev = -1;
        nrtPointerGetDevice(static_cast<char*>(p) + 10, &dev);
        if (dev != t % 2) ++failures;
        if (nrtFree(p) != nrtSuccess) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}
