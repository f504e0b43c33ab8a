// neuronrt C++ layer: exceptions, C++ callables on streams, RAII handles, and
// the caching device allocator. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "neuronrt/neuronrt.h"

namespace neuronrt {

// Any failing runtime call, as an exception. what() is the detailed message.
class Error : public std::runtime_error {
 public:
  Error(nrtStatus status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  nrtStatus status() const { return status_; }

 private:
  nrtStatus status_;
};

// Queued work that failed. Carries the op's name and the original exception
// so that the caller's layer can rethrow it with its own type.
class AsyncError : public Error {
 public:
  AsyncError(std::string op_name, const std::string& message,
             std::exception_ptr original)
      : Error(nrtErrorLaunchFailure, message),
        op_name_(std::move(op_name)),
        original_(std::move(original)) {}
  const std::string& op_name() const { return op_name_; }
  std::exception_ptr original() const { return original_; }

 private:
  std::string op_name_;
  std::exception_ptr original_;
};

// Device memory exhausted even after releasing the cache.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& message, int device, size_t requested,
                   size_t capacity, size_t allocated, size_t reserved)
      : Error(nrtErrorMemoryAllocation, message),
        device(device), requested(requested), capacity(capacity),
        allocated(allocated), reserved(reserved) {}
  int device;
  size_t requested;   // bytes asked for (before rounding)
  size_t capacity;    // device capacity
  size_t allocated;   // bytes held by live allocations
  size_t reserved;    // bytes held by the cache (allocated + cached free)
};

// Throws the exception matching a failed status (AsyncError for pending
// queue failures, Error otherwise). No-op on nrtSuccess.
void check(nrtStatus status);

// Enqueues a C++ callable. An exception thrown by fn is the op's failure: it
// is kept with the op name and rethrown as AsyncError by the next launch()
// or synchronize() on that stream. op_name must outlive the task (a string
// literal or an operator schema's name). Throws a pending AsyncError first.
void launch(nrtStream_t stream, const char* op_name, std::function<void()> fn);

// Work that work of its kind launched right after it may join while it waits
// in a stream's queue: consecutive elementwise steps over the same memory
// then run as one pass (the torch layer's foreach chains). join() is called
// under the stream's lock, on the last queued task, before that task starts.
class JoinableWork {
 public:
  virtual ~JoinableWork() = default;
  virtual void run() = 0;
  // Takes `next`'s work into this one (to run after this one's own) and
  // returns true, or returns false and leaves both unchanged.
  virtual bool join(JoinableWork& next) = 0;
};

// Enqueues `work` as launch() does, or joins it to the stream's last queued
// task when that is joinable work which has not started and accepts it
// (never while profiling: the profiler times each launch on its own).
// Returns whether it joined.
bool launch_joinable(nrtStream_t stream, const char* op_name, std::unique_ptr<JoinableWork> work);

// Waits for the stream; throws AsyncError if queued work failed.
void synchronize(nrtStream_t stream);
// Waits for every stream of the device; throws the first AsyncError.
void synchronize_device(int device);

// Work (launched functions, host functions, copies; not event markers)
// enqueued on any stream of the process so far: how a caller counts the
// submissions an operation made (a compiled graph makes one per call).
uint64_t queued_work_count();

// True on a stream worker thread (where blocking on a stream would deadlock).
bool on_worker_thread();

// Called on each worker thread before it runs any work, with the device
// index (e.g. to size a compute thread pool). Set before streams start.
void set_worker_init(void (*fn)(int device));

// True when NEURON_LAUNCH_BLOCKING=1: every launch waits for its work and
// reports its failure at once.
bool launch_blocking();

// ---- Profiling: timestamps of queued work ------------------------------------
// While profiling is on, every op, host function and copy queued on any
// stream is timestamped: when the host enqueued it and when the stream's
// worker ran it. Off, an enqueue pays one relaxed atomic load and the worker
// one branch per task; nothing is kept.
struct TaskRecord {
  std::string op_name;
  int device = 0;
  int64_t stream = 0;          // nrtStreamGetId
  uint64_t tag = 0;            // the enqueuing thread's tags (profiling_set_tags)
  uint64_t user_tag = 0;
  int32_t host_thread = 0;     // OS thread id of the enqueuing thread
  // steady_clock, nanoseconds since its epoch.
  int64_t enqueue_begin_ns = 0, enqueue_end_ns = 0;  // on the host
  int64_t start_ns = 0, end_ns = 0;                  // on the worker
  bool on_host = false;  // ran on the issuing thread (profiling_record_host_work)
  // Parts: a task may record parts of its work (profiling_record_task_part,
  // a compiled program's steps). Its id is unique within the session; a part
  // carries its task's id and the task's device, stream and tags.
  uint64_t task = 0;
  bool part = false;
};

// Starts a profiling session: drops records left from an earlier one, then
// timestamps what is queued from now on.
void profiling_start();
// Work queued after this is not timestamped; work queued before still is
// when it runs (take its records after synchronizing).
void profiling_stop();
bool profiling_enabled();
// Tags carried by the work the calling thread queues from now on (the
// profiler's correlation ids of the op and user range being dispatched).
void profiling_set_tags(uint64_t tag, uint64_t user_tag);
// Records work that ran on the calling thread in place of the stream, while
// the stream was drained (a torch op's synchronous path), from start_ns to
// now. A no-op while profiling is off.
void profiling_record_host_work(nrtStream_t stream, const char* op_name, int64_t start_ns);
// True on a stream's worker while it runs a task that is being profiled:
// only then does profiling_record_task_part keep anything.
bool profiling_in_task();
// Records [start_ns, end_ns] (profiling_now_ns) as a part of the task the
// calling worker runs, named `name`. Kept before the task's own record.
void profiling_record_task_part(const char* name, int64_t start_ns, int64_t end_ns);
// Moves out the records of the current session's finished work. Once
// profiling is stopped, this also closes the session: work of it that
// finishes later is dropped, so nothing is kept while profiling is off.
std::vector<TaskRecord> profiling_take_records();
// Records kept and not yet taken.
size_t profiling_record_count();
// The clock of TaskRecord's timestamps, now.
int64_t profiling_now_ns();

// ---- Compute threads of the device's kernels --------------------------------
// Runs body(begin, end) over chunks of [0, n), on the calling thread and the
// runtime's compute helpers (kernel_threads() - 1 threads, started on first
// use). Chunks are claimed, not assigned, so a helper the OS has not
// scheduled costs only the chunk it holds, not the whole job. Helpers spin
// for a few microseconds after a job, then sleep: back-to-back kernels find
// them awake, an idle device leaves the cores to the host. One job runs at a
// time; a call made meanwhile (another stream's worker, or from inside a
// body) runs serially on its caller. An exception from body is rethrown
// here after every chunk has finished.
void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& body);

// Threads parallel_for uses, the caller included: TORCHNEURON_KERNEL_THREADS,
// or the number of CPUs this process may run on.
int kernel_threads();

// ---- Caching device allocator ----------------------------------------------
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // accumulated increments
  int64_t freed = 0;      // accumulated decrements
};

struct PoolStats {
  Stat allocation;            // live allocations (count)
  Stat segment;               // raw device segments (count)
  Stat active;                // blocks in use or awaiting stream uses (count)
  Stat inactive_split;        // free blocks inside split segments (count)
  Stat allocated_bytes;       // bytes of live allocations (rounded)
  Stat reserved_bytes;        // bytes of raw segments
  Stat active_bytes;
  Stat inactive_split_bytes;
  Stat requested_bytes;       // bytes asked for by callers (unrounded)
};

struct DeviceStats {
  PoolStats all, small_pool, large_pool;
  int64_t num_alloc_retries = 0;  // raw malloc failures resolved by a cache flush
  int64_t num_ooms = 0;           // OutOfMemoryError thrown
  int64_t num_device_alloc = 0;   // raw nrtMalloc calls
  int64_t num_device_free = 0;    // raw nrtFree calls
  int64_t oversize_allocations = 0;
};

struct SegmentInfo {
  uintptr_t address;
  size_t total_size;
  size_t allocated_size;
  bool is_large;
  int64_t stream_id;
};

// Size classes (as in CUDA): every request rounds up to 512 B. Up to 1 MiB
// they are carved from 2 MiB segments (small pool); larger ones (large pool)
// from shared 20 MiB segments below 10 MiB, else from a segment of their own
// rounded up to 2 MiB (or just the request's size if only that fits).
// Blocks are split and merged; a freed block is reusable at once by work on
// the stream it was allocated on, and by other streams only after the work
// they were recorded with (record_stream) has finished. When the device is
// full, cached free segments are released and the request retried; then, off
// worker threads, the device's streams are synchronized and it is retried
// once more before OutOfMemoryError.
class CachingAllocator {
 public:
  static CachingAllocator& get();

  // size 0 returns nullptr. Thread-safe.
  void* allocate(size_t size, int device, nrtStream_t stream);
  void free(void* ptr);  // nullptr is a no-op
  void record_stream(void* ptr, nrtStream_t stream);
  // Work queued on `stream` uses the allocation at `ptr` on `device` and
  // holds no reference to it: if the host frees it first, the block is reused
  // only after that work (the block's own stream runs later work after it;
  // other streams are recorded as with record_stream). Thread-safe, and
  // lock-free while one stream allocated everything on the device. False
  // (the caller must then keep the memory alive itself) if the device has no
  // allocations or, once several streams allocated, if ptr is not the start
  // of a live allocation.
  bool record_use(void* ptr, int device, nrtStream_t stream);
  // Releases every cached, unused segment (device -1: all devices).
  void empty_cache(int device = -1);
  DeviceStats stats(int device);
  void reset_peak_stats(int device);
  void reset_accumulated_stats(int device);
  std::vector<SegmentInfo> snapshot(int device);
  // Device of an allocation made here, or -1.
  int device_of(const void* ptr);

 private:
  CachingAllocator();
  struct Impl;
  Impl* impl_;
};

// ---- RAII --------------------------------------------------------------------
class Event {
 public:
  explicit Event(unsigned flags = nrtEventDefault) { check(nrtEventCreate(&e_, flags)); }
  ~Event() { if (e_) nrtEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(nrtStream_t s) { check(nrtEventRecord(e_, s)); }
  bool query() const;
  void synchronize() { check(nrtEventSynchronize(e_)); }
  nrtEvent_t get() const { return e_; }

 private:
  nrtEvent_t e_ = nullptr;
};

}  // namespace neuronrt
