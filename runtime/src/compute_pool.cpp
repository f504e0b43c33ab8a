// The device kernels' compute threads (see parallel_for in neuronrt.hpp).
//
// Why not OpenMP: a libgomp team's threads spin for up to milliseconds after
// each parallel region, and on a machine with as many cores as busy threads
// (the host thread issuing ops, the stream worker) that spin takes the
// host's core; a decode step then issued its ops at half speed. These
// helpers spin for kSpin only, then sleep on a condition variable.
//
// A job is published by storing one 64-bit word `claim_`: its generation
// (high 32 bits), its chunk count (16 bits) and the next chunk (low 16 bits).
// Helpers and the caller claim chunks with compare-and-swap on that word, so
// whether a chunk exists is decided from the same word the claim changes: a
// helper waking late for an old job sees another generation and claims
// nothing, and a claimed chunk keeps its job alive, since the caller returns
// only when `remaining_` reaches 0. (An earlier version kept the chunk count
// in a separate variable; a late helper could then pair the next job's count
// with the old generation and claim a chunk that did not exist.)
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
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
constexpr int64_t kMaxChunks = 0xffff;  // chunk counts and indices have 16 bits of claim_

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
    const auto chunks = static_cast<uint32_t>(
        std::min<int64_t>({n, int64_t{threads_} * kChunksPerThread, kMaxChunks}));
    body_.store(&body, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    remaining_.store(chunks, std::memory_order_relaxed);
    error_ = nullptr;
    const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store(uint64_t{gen} << 32 | uint64_t{chunks} << 16, std::memory_order_release);
    generation_.store(gen, std::memory_order_seq_cst);
    // Sleeping helpers count themselves before they check the generation
    // (both seq_cst), so either they see this job or we see them here.
    if (sleeping_helpers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_cv_.notify_all();
    }

    work_on(gen);
    // Wait for chunks held by helpers: spin (they are short), then sleep.
    const auto deadline = std::chrono::steady_clock::now() + kSpin;
    while (remaining_.load(std::memory_order_acquire) != 0 &&
           std::chrono::steady_clock::now() < deadline) {
      cpu_relax();
    }
    if (remaining_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(sleep_mu_);
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      done_cv_.wait(lock, [this] { return remaining_.load(std::memory_order_seq_cst) == 0; });
      caller_sleeping_.store(false, std::memory_order_relaxed);
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
        index = static_cast<uint32_t>(c & 0xffff);
        chunks = static_cast<uint32_t>((c >> 16) & 0xffff);
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
      if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(sleep_mu_);
        done_cv_.notify_one();
      }
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
      if (generation_.load(std::memory_order_acquire) == seen) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleeping_helpers_.fetch_add(1, std::memory_order_seq_cst);
        wake_cv_.wait(lock, [&] { return generation_.load(std::memory_order_seq_cst) != seen; });
        sleeping_helpers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = generation_.load(std::memory_order_acquire);
      work_on(seen);
    }
  }

  const int threads_;
  std::mutex job_mu_;  // one job at a time
  std::once_flag started_;
  // The current job; written by its caller before the job is published and
  // read by those that claimed one of its chunks (atomics only so that a
  // helper's stale read of an old job is not a data race).
  std::atomic<const std::function<void(int64_t, int64_t)>*> body_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<uint32_t> generation_{0};
  std::atomic<uint64_t> claim_{0};  // generation << 32 | chunks << 16 | next chunk
  std::atomic<uint32_t> remaining_{0};
  // Sleeping: helpers wait for a new generation, the caller for the last chunk.
  std::mutex sleep_mu_;
  std::condition_variable wake_cv_, done_cv_;
  std::atomic<int> sleeping_helpers_{0};
  std::atomic<bool> caller_sleeping_{false};
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
