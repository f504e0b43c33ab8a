// The device kernels' compute threads (see parallel_for in neuronrt.hpp).
//
// Why not OpenMP: a libgomp team's threads spin for up to milliseconds after
// each parallel region, and on a machine with as many cores as busy threads
// (the host thread issuing ops, the stream worker) that spin takes the
// host's core; a decode step then issued its ops at half speed. These
// helpers spin for kSpin only, then sleep on a futex (std::atomic::wait).
//
// A job is published by bumping `claim_`'s generation (high 32 bits) with its
// next-chunk counter (low 32 bits) at 0. Helpers and the caller claim chunks
// with compare-and-swap on that word, so a helper waking late for an old job
// sees a different generation and claims nothing; a claimed chunk keeps its
// job alive, since the caller returns only when `remaining_` reaches 0.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <cstdio>
#include <mutex>
#include <utility>
#include <thread>

#include "config.hpp"
#include "neuronrt/neuronrt.hpp"
#include "spin.hpp"

namespace neuronrt {
namespace {

constexpr auto kSpin = std::chrono::microseconds(30);
constexpr int kChunksPerThread = 4;  // small chunks let the awake threads balance the rest

thread_local bool t_in_job = false;  // a body that calls parallel_for runs it serially

using detail::cpu_relax;

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

class ComputePool {
 public:
  explicit ComputePool(int threads) : threads_(threads) {}

  int threads() const { return threads_; }

  void run(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    if (n <= 0) return;
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (threads_ == 1 || n == 1 || t_in_job || !job.owns_lock()) {
      body(0, n);
      return;
    }
    start_helpers_once();
    const auto chunks =
        static_cast<uint32_t>(std::min<int64_t>(n, int64_t{threads_} * kChunksPerThread));
    body_.store(&body, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    chunks_.store(chunks, std::memory_order_relaxed);
    remaining_.store(chunks, std::memory_order_relaxed);
    error_ = nullptr;
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store(uint64_t{gen} << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_release);
    generation_.notify_all();  // a futex call only when a helper sleeps

    work_on(gen);
    // Wait for chunks held by helpers: spin (they are short), then sleep.
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    uint32_t left;
    while ((left = remaining_.load(std::memory_order_acquire)) != 0) {
      if (std::chrono::steady_clock::now() < deadline) {
        cpu_relax();
      } else {
        remaining_.wait(left, std::memory_order_acquire);
      }
    }
    body_.store(nullptr, std::memory_order_relaxed);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  // Claims and runs chunks of job `gen` until none is left.
  void work_on(uint32_t gen) {
    t_in_job = true;
    for (;;) {
      uint64_t c = claim_.load(std::memory_order_acquire);
      uint32_t index, chunks;
      do {
        // A late helper may read the next job's chunk count here; its CAS
        // then fails on the generation, so the mix-up cannot run anything.
        index = static_cast<uint32_t>(c);
        chunks = chunks_.load(std::memory_order_relaxed);
        if (static_cast<uint32_t>(c >> 32) != gen || index >= chunks) {
          t_in_job = false;
          return;
        }
      } while (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel));
      const int64_t n = n_.load(std::memory_order_relaxed);
      const int64_t begin = n * index / chunks, end = n * (index + 1) / chunks;
      try {
        (*body_.load(std::memory_order_relaxed))(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu_);
        if (!error_) error_ = std::current_exception();
      }
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
    }
  }

  void start_helpers_once() {
    std::call_once(started_, [this] {
      for (int i = 1; i < threads_; ++i) {
        std::thread([this, i] { helper_main(i); }).detach();
      }
    });
  }

  void helper_main(int index) {
    char name[16];
    std::snprintf(name, sizeof name, "neuron.k%d", index);
    pthread_setname_np(pthread_self(), name);
    uint32_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto deadline = std::chrono::steady_clock::now() + kSpin;
      while (generation_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < deadline) {
        cpu_relax();
      }
      generation_.wait(seen, std::memory_order_acquire);
      seen = generation_.load(std::memory_order_acquire);
      work_on(seen);
    }
  }

  const int threads_;
  std::mutex job_mu_;  // one job at a time
  std::once_flag started_;
  // The current job; written by its caller before the generation is published
  // (atomics because a helper waking late reads them while the next job is set up).
  std::atomic<const std::function<void(int64_t, int64_t)>*> body_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<uint32_t> chunks_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint64_t> claim_{0};  // generation << 32 | next chunk
  std::atomic<uint32_t> remaining_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;
};

// Never destroyed: helpers are detached and may be asleep in it at exit.
ComputePool& pool() {
  static ComputePool* p = [] {
    const int configured = detail::config().kernel_threads;
    return new ComputePool(configured > 0 ? configured : usable_cpus());
  }();
  return *p;
}

}  // namespace

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  pool().run(n, body);
}

int kernel_threads() { return pool().threads(); }

}  // namespace neuronrt
