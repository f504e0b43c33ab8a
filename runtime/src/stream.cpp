// Streams: an in-order queue served by one worker thread, started on first
// use. Enqueue is the per-op hot path of the torch backend, so it takes one
// uncontended mutex, moves the task into a ring buffer and only signals the
// condition variable when the worker is actually asleep.
//
// Failures: the first failing task fills the stream's failure slot; work
// queued behind it is skipped (event markers and waits still run, so nobody
// waiting on an event hangs). The next launch or synchronize reports the
// failure and clears the slot; everything queued before that point is skipped.
#include <chrono>
#include "stream.hpp"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "device.hpp"
#include "error.hpp"
#include "event.hpp"
#include "neuronrt/neuronrt.hpp"
#include "spin.hpp"

using neuronrt::detail::Failure;
using neuronrt::detail::Task;

namespace neuronrt::detail {
namespace {

thread_local nrtStream_t t_worker_stream = nullptr;
std::atomic<void (*)(int)> g_worker_init{nullptr};

// Destroyed streams are parked here instead of freed, so a stale handle
// fails validation rather than touching freed memory. Streams are few.
std::mutex g_graveyard_mu;
std::vector<nrtStream_t>& graveyard() {
  static auto* g = new std::vector<nrtStream_t>();
  return *g;
}

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

Failure make_failure(int device, const char* op, std::string what,
                     std::exception_ptr original) {
  Failure f;
  f.op_name = op;
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, " failed on neuron:%d: ", device);
  f.message = f.op_name + prefix + what;
  f.original = std::move(original);
  return f;
}

std::vector<nrtStream_t> streams_of(Device& d) {
  std::lock_guard<std::mutex> lock(d.mu);
  return d.streams;
}

nrtStream_t create_stream(Device& d, int64_t id, int priority) {
  auto* s = new nrtStream_st(d.index, id, priority);
  d.streams.push_back(s);
  return s;
}

// At exit, lets every worker drain its queue and joins it, so no thread
// outlives the process's static state. It is registered with atexit when
// the first worker starts, so it runs before the destructors of statics
// built earlier (e.g. the framework's), which queued work may still use.
// Devices and streams themselves are leaked on purpose: tensors may be freed
// later in static destruction, and work they queue then runs inline.
void reap_workers() {
  if (in_forked_child()) return;  // the workers do not exist in this process
  std::vector<nrtStream_t> all;
  for_each_device([&all](Device& d) {
    std::vector<nrtStream_t> s = streams_of(d);
    all.insert(all.end(), s.begin(), s.end());
  });
  for (nrtStream_t s : all) s->stop();
  for (nrtStream_t s : all) s->join();
}

void register_reaper_once() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(reap_workers); });
}

}  // namespace

nrtStatus check_stream(nrtStream_t stream) {
  if (nrtStatus st = api_enter(); st != nrtSuccess) [[unlikely]] return st;
  if (stream == nullptr) [[unlikely]] {
    return set_error(nrtErrorInvalidHandle,
                     "null stream handle (use nrtStreamGetDefault for a device's default stream)");
  }
  if (stream->magic.load(std::memory_order_relaxed) != nrtStream_st::kMagic) [[unlikely]] {
    return set_errorf(nrtErrorInvalidHandle, "%p is not a live stream (destroyed?)",
                      static_cast<void*>(stream));
  }
  return nrtSuccess;
}

nrtStream_t current_worker_stream() { return t_worker_stream; }

void wait_device_idle(int device) {
  for (nrtStream_t s : streams_of(device_at(device))) {
    if (s != t_worker_stream) s->synchronize(/*consume=*/false);
  }
}

}  // namespace neuronrt::detail

using namespace neuronrt::detail;

namespace {
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(50);
// Work tasks (functions, host functions, copies) ever enqueued, on any stream.
std::atomic<uint64_t> g_queued_work{0};
}  // namespace

// ---- nrtStream_st ------------------------------------------------------------

nrtStatus nrtStream_st::enqueue(Task&& t, bool report_failure, uint64_t* seq, bool* joined) {
  if (t.kind <= Task::Kind::kMemcpy) g_queued_work.fetch_add(1, std::memory_order_relaxed);
  if (profiling_on() && t.kind <= Task::Kind::kMemcpy) [[unlikely]] {  // work, not markers
    t.profile = begin_task_profile(device, id, t.op_name);
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (enqueued_ - completed_ >= kMaxQueued && t_worker_stream == nullptr) [[unlikely]] {
    const uint64_t target = enqueued_ - kMaxQueued / 2;
    ++done_waiters_;
    done_cv_.wait(lock, [&] { return completed_ >= target || stopped_; });
    --done_waiters_;
  }
  if (report_failure && failed_) [[unlikely]] {
    Failure f;
    take_failure_locked(&f);
    lock.unlock();
    return set_async_error(std::move(f.op_name), f.message, std::move(f.original));
  }
  if (t.kind == Task::Kind::kJoinable && !t.profile && !queue_.empty()) {
    // The queue's last task has not started (the worker takes tasks out of
    // the queue before running them), so work joined to it runs where it
    // would have run queued after it.
    Task& last = queue_.back();
    if (last.kind == Task::Kind::kJoinable && last.seq > skip_through_ &&
        last.joinable->join(*t.joinable)) {
      if (seq) *seq = last.seq;
      if (joined) *joined = true;
      return nrtSuccess;
    }
  }
  if (stopped_) [[unlikely]] {
    // The worker is gone (process exit, or a destroyed stream): run inline.
    const uint64_t s = ++enqueued_;
    const bool skip = failed_ || s <= skip_through_;
    if (seq) *seq = s;
    lock.unlock();
    if (t.profile) t.profile->record.enqueue_end_ns = now_ns();
    Failure f;
    const bool failed = run(t, skip, &f);
    lock.lock();
    finish_locked(s, failed, &f);
    return nrtSuccess;
  }
  if (!started_) [[unlikely]] {
    try {
      worker_ = std::thread([this] { worker_main(); });
    } catch (const std::system_error& e) {
      return set_errorf(nrtErrorLaunchFailure,
                        "could not start the worker thread of neuron:%d stream %lld: %s",
                        device, static_cast<long long>(id), e.what());
    }
    started_ = true;
    note_worker_thread_started();
    register_reaper_once();
  }
  t.seq = ++enqueued_;
  if (seq) *seq = t.seq;
  if (t.profile) [[unlikely]] t.profile->record.enqueue_end_ns = now_ns();
  queue_.push(std::move(t));
  enqueued_hint_.store(t.seq, std::memory_order_release);
  const bool wake = worker_waiting_;
  lock.unlock();
  if (wake) work_cv_.notify_one();
  return nrtSuccess;
}

nrtStatus nrtStream_st::submit(Task&& t, bool* joined) {
  uint64_t seq = 0;
  if (nrtStatus st = enqueue(std::move(t), /*report_failure=*/true, &seq, joined); st != nrtSuccess) {
    return st;
  }
  if (config().launch_blocking) [[unlikely]] {
    wait_for(seq);
    return report_failure();
  }
  return nrtSuccess;
}

void nrtStream_st::worker_main() {
  t_worker_stream = this;
  char name[16];
  std::snprintf(name, sizeof name, "neuron%d.s%lld", device, static_cast<long long>(id));
  pthread_setname_np(pthread_self(), name);
  if (auto init = g_worker_init.load(std::memory_order_acquire)) {
    try {
      init(device);
    } catch (...) {
      // A failing init must not kill the worker; the work itself will fail.
    }
  }
  constexpr size_t kMaxBatch = 32;  // bounds how late a waiter hears of a finished task
  std::vector<Task> batch;
  batch.reserve(kMaxBatch);
  bool skip_flags[kMaxBatch];
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty() && !stopping_) {
      // Spin briefly before sleeping: a host issuing a stream of small ops
      // then finds the worker awake and pays for no wake-up (a futex call
      // per op otherwise, which would double the cost of a small op).
      const uint64_t seen = enqueued_;
      lock.unlock();
      const auto deadline = std::chrono::steady_clock::now() + kSpinBeforeSleep;
      while (enqueued_hint_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < deadline) {
        cpu_relax();
      }
      lock.lock();
    }
    while (queue_.empty() && !stopping_) {
      worker_waiting_ = true;
      work_cv_.wait(lock);
      worker_waiting_ = false;
    }
    if (queue_.empty()) break;  // stopping, and drained
    // Take what is queued, up to kMaxBatch tasks, under one lock: the host
    // enqueues under the same lock, and locking twice per task made the two
    // threads contend on every small op.
    batch.clear();
    bool skip = failed_;
    while (!queue_.empty() && batch.size() < kMaxBatch) {
      // Joinable work queued last stays in the queue while the batch runs,
      // so that what the host queues meanwhile can still join it.
      if (!batch.empty() && queue_.size() == 1 && queue_.back().kind == Task::Kind::kJoinable) break;
      batch.push_back(queue_.pop());
      skip_flags[batch.size() - 1] = skip || batch.back().seq <= skip_through_;
    }
    lock.unlock();
    Failure f;
    uint64_t failed_seq = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      // After a failure the rest of the batch is skipped, as the queue would.
      const bool failed = run(batch[i], skip_flags[i] || failed_seq != 0, &f);
      if (failed && failed_seq == 0) failed_seq = batch[i].seq;
    }
    lock.lock();
    if (failed_seq != 0) finish_locked(failed_seq, true, &f);
    finish_locked(batch.back().seq, false, nullptr);
    queue_.shrink_if_idle_and_large();
  }
  stopped_ = true;
}

void nrtStream_st::finish_locked(uint64_t seq, bool failed, Failure* failure) {
  if (failed && !failed_) {
    failed_ = true;
    failure_ = std::move(*failure);
  }
  if (seq > completed_) completed_ = seq;
  if (done_waiters_ > 0) done_cv_.notify_all();
}

bool nrtStream_st::run(Task& t, bool skip, Failure* failure) {
  bool failed = false;
  TaskProfile* profile = skip ? nullptr : t.profile.get();
  if (profile) [[unlikely]] {
    profile->record.start_ns = now_ns();
    t_running_task = profile;
  }
  switch (t.kind) {
    case Task::Kind::kRecord:
      event_complete(t.event, t.generation);
      break;
    case Task::Kind::kWait:
      event_wait(t.event, t.generation);
      break;
    case Task::Kind::kFunction:
    case Task::Kind::kJoinable:
      if (skip) break;
      try {
        if (t.kind == Task::Kind::kFunction) {
          t.fn();
        } else {
          t.joinable->run();
        }
      } catch (...) {
        std::exception_ptr e = std::current_exception();
        *failure = make_failure(device, t.op_name, describe(e), e);
        failed = true;
      }
      break;
    case Task::Kind::kHostFn: {
      if (skip) break;
      char message[1024] = "";
      int rc;
      try {
        rc = t.host_fn(t.a, message, sizeof message);
      } catch (...) {  // a C++ host function may still throw
        std::exception_ptr e = std::current_exception();
        *failure = make_failure(device, t.op_name, describe(e), e);
        failed = true;
        break;
      }
      if (rc != 0) {
        message[sizeof message - 1] = '\0';
        std::string what = message[0] ? message : "host function returned " + std::to_string(rc);
        auto original = std::make_exception_ptr(std::runtime_error(what));
        *failure = make_failure(device, t.op_name, std::move(what), std::move(original));
        failed = true;
      }
      break;
    }
    case Task::Kind::kMemcpy:
      if (!skip && t.n != 0) std::memmove(t.a, t.b, t.n);
      break;
  }
  if (profile) [[unlikely]] {
    t_running_task = nullptr;
    // Before the captures are dropped: their release is not the op's work.
    profile->record.end_ns = now_ns();
    keep_task_profile(std::move(t.profile));
  }
  t.profile.reset();
  // Drop captures and event references before the task counts as finished:
  // memory released by a task is free once a synchronize returns.
  t.fn = nullptr;
  t.joinable.reset();
  if (t.event != nullptr) {
    event_release(t.event);
    t.event = nullptr;
  }
  return failed;
}

void nrtStream_st::wait_for(uint64_t seq) {
  if (t_worker_stream == this) return;  // it would wait for itself
  std::unique_lock<std::mutex> lock(mu_);
  if (completed_ >= seq) return;
  ++done_waiters_;
  done_cv_.wait(lock, [&] { return completed_ >= seq; });
  --done_waiters_;
}

nrtStatus nrtStream_st::synchronize(bool consume) {
  Failure f;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = enqueued_;
    if (completed_ < target && t_worker_stream != this) {
      ++done_waiters_;
      done_cv_.wait(lock, [&] { return completed_ >= target; });
      --done_waiters_;
    }
    if (!consume || !take_failure_locked(&f)) return nrtSuccess;
  }
  return set_async_error(std::move(f.op_name), f.message, std::move(f.original));
}

bool nrtStream_st::take_failure_locked(Failure* out) {
  if (!failed_) return false;
  *out = std::move(failure_);
  failure_ = Failure{};
  failed_ = false;
  skip_through_ = enqueued_;  // work queued behind the failure stays skipped
  return true;
}

bool nrtStream_st::take_failure(Failure* out) {
  std::lock_guard<std::mutex> lock(mu_);
  return take_failure_locked(out);
}

nrtStatus nrtStream_st::report_failure() {
  Failure f;
  if (!take_failure(&f)) return nrtSuccess;
  return set_async_error(std::move(f.op_name), f.message, std::move(f.original));
}

bool nrtStream_st::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_ >= enqueued_;
}

void nrtStream_st::stop() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (!started_) stopped_ = true;  // no worker will ever start
    wake = worker_waiting_;
  }
  if (wake) work_cv_.notify_one();
}

void nrtStream_st::join() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_) return;
  }
  if (!worker_.joinable()) return;
  if (worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();  // exit() called from a task: cannot join ourselves
  } else {
    worker_.join();
  }
}

// ---- C API -----------------------------------------------------------------

extern "C" {

nrtStatus nrtStreamGetDefault(nrtStream_t* stream, int device) {
  if (stream == nullptr) return set_error(nrtErrorInvalidValue, "nrtStreamGetDefault: stream is null");
  *stream = nullptr;
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  Device& d = device_at(device);
  nrtStream_t s = d.default_stream.load(std::memory_order_acquire);
  if (s == nullptr) [[unlikely]] {
    std::lock_guard<std::mutex> lock(d.mu);
    s = d.default_stream.load(std::memory_order_acquire);
    if (s == nullptr) {
      s = create_stream(d, /*id=*/0, /*priority=*/0);
      d.default_stream.store(s, std::memory_order_release);
    }
  }
  *stream = s;
  return nrtSuccess;
}

nrtStatus nrtStreamCreate(nrtStream_t* stream, int device, int priority) {
  if (stream == nullptr) return set_error(nrtErrorInvalidValue, "nrtStreamCreate: stream is null");
  *stream = nullptr;
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  Device& d = device_at(device);
  std::lock_guard<std::mutex> lock(d.mu);
  *stream = create_stream(d, d.next_stream_id++, priority);
  return nrtSuccess;
}

nrtStatus nrtStreamDestroy(nrtStream_t stream) {
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  if (stream->id == 0) {
    return set_error(nrtErrorInvalidValue, "nrtStreamDestroy: the default stream cannot be destroyed");
  }
  if (t_worker_stream == stream) {
    return set_error(nrtErrorInvalidValue,
                     "nrtStreamDestroy: a stream cannot be destroyed from its own work");
  }
  {
    Device& d = device_at(stream->device);
    std::lock_guard<std::mutex> lock(d.mu);
    std::erase(d.streams, stream);
  }
  stream->stop();  // drains the queue first
  stream->join();
  stream->magic.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_graveyard_mu);
  graveyard().push_back(stream);
  return nrtSuccess;
}

nrtStatus nrtStreamSynchronize(nrtStream_t stream) {
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  if (t_worker_stream == stream) {
    return set_error(nrtErrorInvalidValue,
                     "nrtStreamSynchronize: called from work running on that stream (would deadlock)");
  }
  return stream->synchronize(/*consume=*/true);
}

nrtStatus nrtStreamQuery(nrtStream_t stream) {
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  return stream->idle() ? nrtSuccess : nrtErrorNotReady;
}

int nrtStreamGetDeviceIndex(nrtStream_t stream) {
  return check_stream(stream) == nrtSuccess ? stream->device : -1;
}

int64_t nrtStreamGetId(nrtStream_t stream) {
  return check_stream(stream) == nrtSuccess ? stream->id : -1;
}

nrtStatus nrtLaunchHostFunc(nrtStream_t stream, nrtHostFn fn, void* user,
                            const char* op_name) {
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  if (fn == nullptr) return set_error(nrtErrorInvalidValue, "nrtLaunchHostFunc: fn is null");
  Task t;
  t.kind = Task::Kind::kHostFn;
  t.op_name = op_name ? op_name : "host function";
  t.host_fn = fn;
  t.a = user;
  return stream->submit(std::move(t));
}

nrtStatus nrtDeviceSynchronize(int device) {
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  if (t_worker_stream != nullptr && t_worker_stream->device == device) {
    return set_error(nrtErrorInvalidValue,
                     "nrtDeviceSynchronize: called from work running on that device (would deadlock)");
  }
  // Wait for every stream, then report the first failure; all slots clear.
  const std::vector<nrtStream_t> streams = streams_of(device_at(device));
  for (nrtStream_t s : streams) s->synchronize(/*consume=*/false);
  bool have = false;
  Failure first;
  for (nrtStream_t s : streams) {
    Failure f;
    if (s->take_failure(&f) && !have) {
      first = std::move(f);
      have = true;
    }
  }
  if (!have) return nrtSuccess;
  return set_async_error(std::move(first.op_name), first.message, std::move(first.original));
}

}  // extern "C"

// ---- C++ layer -----------------------------------------------------------------

namespace neuronrt {

void launch(nrtStream_t stream, const char* op_name, std::function<void()> fn) {
  check(check_stream(stream));
  if (!fn) check(set_error(nrtErrorInvalidValue, "launch: empty function"));
  Task t;
  t.kind = Task::Kind::kFunction;
  t.op_name = op_name ? op_name : "task";
  t.fn = std::move(fn);
  check(stream->submit(std::move(t)));
}

bool launch_joinable(nrtStream_t stream, const char* op_name, std::unique_ptr<JoinableWork> work) {
  check(check_stream(stream));
  if (!work) check(set_error(nrtErrorInvalidValue, "launch_joinable: no work"));
  Task t;
  t.kind = Task::Kind::kJoinable;
  t.op_name = op_name ? op_name : "task";
  t.joinable = std::move(work);
  bool joined = false;
  check(stream->submit(std::move(t), &joined));
  return joined;
}

void synchronize(nrtStream_t stream) { check(nrtStreamSynchronize(stream)); }

void synchronize_device(int device) { check(nrtDeviceSynchronize(device)); }

bool on_worker_thread() { return detail::t_worker_stream != nullptr; }

uint64_t queued_work_count() { return g_queued_work.load(std::memory_order_relaxed); }

void set_worker_init(void (*fn)(int device)) {
  detail::g_worker_init.store(fn, std::memory_order_release);
}

bool launch_blocking() {
  const detail::Config& c = detail::config();
  return c.ok && c.launch_blocking;
}

}  // namespace neuronrt
