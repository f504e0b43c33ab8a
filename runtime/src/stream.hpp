// In-order streams, each served by one lazily started worker thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "neuronrt/neuronrt.h"
#include "neuronrt/neuronrt.hpp"
#include "profiling.hpp"

namespace neuronrt::detail {

// One unit of queued work. A flat struct (not a class hierarchy) so that
// enqueueing costs no allocation beyond what a std::function's captures need.
struct Task {
  // Work kinds come first (kind <= kMemcpy), then markers.
  enum class Kind : uint8_t { kFunction, kJoinable, kHostFn, kMemcpy, kRecord, kWait };
  Kind kind = Kind::kFunction;
  const char* op_name = "";
  uint64_t seq = 0;
  std::function<void()> fn;        // kFunction
  std::unique_ptr<JoinableWork> joinable;  // kJoinable
  nrtHostFn host_fn = nullptr;     // kHostFn
  void* a = nullptr;               // kHostFn: user data; kMemcpy: dst
  const void* b = nullptr;         // kMemcpy: src
  size_t n = 0;                    // kMemcpy: byte count
  nrtEvent_st* event = nullptr;    // kRecord / kWait: holds a reference
  uint64_t generation = 0;         // kRecord / kWait: which recording
  std::unique_ptr<TaskProfile> profile;  // only while profiling, for work
};

// FIFO ring buffer that only grows: in steady state push/pop never allocate.
class TaskQueue {
 public:
  bool empty() const { return size_ == 0; }
  void push(Task&& t) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(t);
    ++size_;
  }
  size_t size() const { return size_; }
  // The last task queued (not empty): still waiting, so its work may grow.
  Task& back() { return slots_[(head_ + size_ - 1) & (slots_.size() - 1)]; }
  // After a burst, give a huge empty buffer back (called off the hot path).
  void shrink_if_idle_and_large() {
    if (size_ == 0 && slots_.size() > kKeepSlots) {
      std::vector<Task>().swap(slots_);
      head_ = 0;
    }
  }
  Task pop() {
    Task t = std::move(slots_[head_]);
    slots_[head_].fn = nullptr;  // moved-from std::function: make it empty
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
    return t;
  }

 private:
  void grow() {
    std::vector<Task> bigger(slots_.empty() ? 64 : slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) {
      bigger[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    }
    slots_.swap(bigger);
    head_ = 0;
  }
  static constexpr size_t kKeepSlots = 4096;
  std::vector<Task> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

// The first failure on a stream, kept until reported.
struct Failure {
  std::string op_name;
  std::string message;  // "<op> failed on neuron:<d>: <what>"
  std::exception_ptr original;
};

// Validates a stream handle (and the process state); nrtSuccess if usable.
nrtStatus check_stream(nrtStream_t stream);

// The stream whose worker is the calling thread, or nullptr.
nrtStream_t current_worker_stream();

// Waits for all work queued so far on every stream of the device without
// consuming their errors (used by the allocator before an OOM retry).
void wait_device_idle(int device);

}  // namespace neuronrt::detail

struct nrtStream_st {
  static constexpr uint32_t kMagic = 0x5354524d;  // "STRM"
  // A host thread that gets this far ahead of the worker waits until half of
  // the backlog has run (like a device's bounded launch queue), so a fast
  // producer cannot grow the queue without limit. Workers never wait here.
  static constexpr uint64_t kMaxQueued = uint64_t{1} << 16;
  nrtStream_st(int device, int64_t id, int priority)
      : device(device), id(id), priority(priority) {}

  // Queues t. With report_failure, a pending failure is reported (and
  // cleared) instead of queueing. *seq receives the task's sequence number.
  // A joinable task joins the last queued task instead when that one is
  // joinable, has not started and accepts it (never while profiling, which
  // times each op); *joined then says so and *seq is that task's number.
  nrtStatus enqueue(neuronrt::detail::Task&& t, bool report_failure, uint64_t* seq,
                    bool* joined = nullptr);
  // Queues work from an API call: reports a pending failure first, and under
  // NEURON_LAUNCH_BLOCKING=1 waits for the work and reports its failure.
  nrtStatus submit(neuronrt::detail::Task&& t, bool* joined = nullptr);
  // Waits until task `seq` has finished (no-op on the stream's own worker).
  void wait_for(uint64_t seq);
  // Waits for everything queued so far; with consume, reports the failure.
  nrtStatus synchronize(bool consume);
  // Reports and clears a pending failure, if any.
  nrtStatus report_failure();
  // Moves a pending failure out (clearing the slot); false if there is none.
  bool take_failure(neuronrt::detail::Failure* out);
  bool idle();
  // Lets the worker drain its queue, then joins it. Later work runs inline.
  void stop();
  void join();

  std::atomic<uint32_t> magic{kMagic};
  const int device;
  const int64_t id;
  const int priority;

 private:
  void worker_main();
  bool run(neuronrt::detail::Task& t, bool skip, neuronrt::detail::Failure* failure);
  bool take_failure_locked(neuronrt::detail::Failure* out);
  void finish_locked(uint64_t seq, bool failed, neuronrt::detail::Failure* failure);

  std::mutex mu_;
  std::condition_variable work_cv_;   // the worker waits here for work
  std::condition_variable done_cv_;   // synchronizers wait here
  neuronrt::detail::TaskQueue queue_;
  uint64_t enqueued_ = 0;     // seq of the last queued task
  uint64_t completed_ = 0;    // seq of the last finished task
  uint64_t skip_through_ = 0; // tasks up to this seq were queued behind a reported failure
  bool worker_waiting_ = false;
  // Mirror of enqueued_ that the worker polls without the lock while it
  // spins before sleeping.
  std::atomic<uint64_t> enqueued_hint_{0};
  int done_waiters_ = 0;
  bool started_ = false;
  bool stopping_ = false;
  bool stopped_ = false;      // worker gone: run new work inline
  bool failed_ = false;
  neuronrt::detail::Failure failure_;
  std::thread worker_;
};
