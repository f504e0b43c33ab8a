// Events. Recording bumps the event's generation and queues a marker that
// completes that generation (with a steady_clock timestamp) when the stream
// reaches it. Waiting on an event from another stream queues a task that
// blocks that stream's worker until the captured generation completes.
#include "event.hpp"

#include "device.hpp"
#include "error.hpp"
#include "neuronrt/neuronrt.hpp"
#include "stream.hpp"

namespace neuronrt::detail {
namespace {

nrtStatus check_event(nrtEvent_t e) {
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  if (e == nullptr) return set_error(nrtErrorInvalidHandle, "null event handle");
  if (e->magic.load(std::memory_order_relaxed) != nrtEvent_st::kMagic) {
    return set_errorf(nrtErrorInvalidHandle, "%p is not a live event (destroyed?)",
                      static_cast<void*>(e));
  }
  return nrtSuccess;
}

}  // namespace

void event_retain(nrtEvent_st* e) { e->refs.fetch_add(1, std::memory_order_relaxed); }

void event_release(nrtEvent_st* e) {
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
}

void event_complete(nrtEvent_st* e, uint64_t gen) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(e->mu);
  // A marker of an older recording (e.g. on a slower stream) must not move
  // the event back in time.
  if (gen > e->completed) {
    e->completed = gen;
    e->stamp = now;
  }
  if (e->waiters > 0) e->cv.notify_all();
}

void event_wait(nrtEvent_st* e, uint64_t gen) {
  std::unique_lock<std::mutex> lock(e->mu);
  if (e->completed >= gen) return;
  ++e->waiters;
  e->cv.wait(lock, [&] { return e->completed >= gen; });
  --e->waiters;
}

}  // namespace neuronrt::detail

using namespace neuronrt::detail;

extern "C" {

nrtStatus nrtEventCreate(nrtEvent_t* event, unsigned flags) {
  if (event == nullptr) return set_error(nrtErrorInvalidValue, "nrtEventCreate: event is null");
  *event = nullptr;
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  if ((flags & ~static_cast<unsigned>(nrtEventDisableTiming)) != 0) {
    return set_errorf(nrtErrorInvalidValue,
                      "nrtEventCreate: unknown flags 0x%x (accepted: nrtEventDefault, "
                      "nrtEventDisableTiming)", flags);
  }
  *event = new nrtEvent_st(flags);
  return nrtSuccess;
}

nrtStatus nrtEventDestroy(nrtEvent_t event) {
  if (nrtStatus st = check_event(event); st != nrtSuccess) return st;
  event->magic.store(0, std::memory_order_relaxed);
  event_release(event);  // queued markers/waits keep it alive until they run
  return nrtSuccess;
}

nrtStatus nrtEventRecord(nrtEvent_t event, nrtStream_t stream) {
  if (nrtStatus st = check_event(event); st != nrtSuccess) return st;
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  Task t;
  t.kind = Task::Kind::kRecord;
  t.op_name = "event record";
  {
    std::lock_guard<std::mutex> lock(event->mu);
    t.generation = ++event->recorded;
  }
  const uint64_t gen = t.generation;
  event_retain(event);
  t.event = event;
  // Recording never reports a stream's pending failure: markers must always
  // be queued so that waiters make progress.
  nrtStatus st = stream->enqueue(std::move(t), /*report_failure=*/false, nullptr);
  if (st != nrtSuccess) {
    // Nothing was queued: complete the generation so that waits cannot hang.
    event_complete(event, gen);
    event_release(event);
  }
  return st;
}

nrtStatus nrtEventQuery(nrtEvent_t event) {
  if (nrtStatus st = check_event(event); st != nrtSuccess) return st;
  std::lock_guard<std::mutex> lock(event->mu);
  return event->completed >= event->recorded ? nrtSuccess : nrtErrorNotReady;
}

nrtStatus nrtEventSynchronize(nrtEvent_t event) {
  if (nrtStatus st = check_event(event); st != nrtSuccess) return st;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(event->mu);
    gen = event->recorded;
  }
  event_wait(event, gen);
  return nrtSuccess;
}

nrtStatus nrtStreamWaitEvent(nrtStream_t stream, nrtEvent_t event) {
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  if (nrtStatus st = check_event(event); st != nrtSuccess) return st;
  Task t;
  t.kind = Task::Kind::kWait;
  t.op_name = "event wait";
  {
    std::lock_guard<std::mutex> lock(event->mu);
    // Never recorded, or already complete: nothing to wait for.
    if (event->recorded == 0 || event->completed >= event->recorded) return nrtSuccess;
    t.generation = event->recorded;
  }
  event_retain(event);
  t.event = event;
  nrtStatus st = stream->enqueue(std::move(t), /*report_failure=*/false, nullptr);
  if (st != nrtSuccess) event_release(event);
  return st;
}

nrtStatus nrtEventElapsedTime(float* ms, nrtEvent_t start, nrtEvent_t end) {
  if (ms == nullptr) return set_error(nrtErrorInvalidValue, "nrtEventElapsedTime: ms is null");
  if (nrtStatus st = check_event(start); st != nrtSuccess) return st;
  if (nrtStatus st = check_event(end); st != nrtSuccess) return st;
  if ((start->flags | end->flags) & nrtEventDisableTiming) {
    return set_error(nrtErrorInvalidValue,
                     "nrtEventElapsedTime: an event created with nrtEventDisableTiming has "
                     "no timestamp; create both events with timing enabled");
  }
  std::chrono::steady_clock::time_point t0, t1;
  for (auto [e, out] : {std::pair{start, &t0}, std::pair{end, &t1}}) {
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->recorded == 0) {
      return set_error(nrtErrorInvalidValue,
                       "nrtEventElapsedTime: both events must have been recorded");
    }
    if (e->completed < e->recorded) {
      return set_error(nrtErrorNotReady,
                       "nrtEventElapsedTime: an event has not completed yet");
    }
    *out = e->stamp;
  }
  *ms = std::chrono::duration<float, std::milli>(t1 - t0).count();
  return nrtSuccess;
}

}  // extern "C"

namespace neuronrt {

bool Event::query() const {
  const nrtStatus st = nrtEventQuery(e_);
  if (st == nrtErrorNotReady) return false;
  check(st);
  return true;
}

}  // namespace neuronrt
