// Events: markers queued on a stream that complete (with a timestamp) when
// the stream reaches them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "neuronrt/neuronrt.h"

struct nrtEvent_st {
  static constexpr uint32_t kMagic = 0x45564e54;  // "EVNT"
  explicit nrtEvent_st(unsigned flags) : flags(flags) {}

  std::atomic<uint32_t> magic{kMagic};
  const unsigned flags;
  // The handle holds one reference, each queued marker or wait holds one, so
  // destroying an event with work still pending is safe.
  std::atomic<int> refs{1};

  std::mutex mu;
  std::condition_variable cv;
  int waiters = 0;
  uint64_t recorded = 0;   // generation of the latest nrtEventRecord
  uint64_t completed = 0;  // highest generation whose marker has run
  std::chrono::steady_clock::time_point stamp{};  // when `completed` was reached
};

namespace neuronrt::detail {

void event_retain(nrtEvent_st* e);
void event_release(nrtEvent_st* e);
// Marker task: generation `gen` of the event is complete now.
void event_complete(nrtEvent_st* e, uint64_t gen);
// Blocks until generation `gen` of the event is complete.
void event_wait(nrtEvent_st* e, uint64_t gen);

}  // namespace neuronrt::detail
