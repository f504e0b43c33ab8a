// Waiting on a peer's flag in shared memory: spin briefly (a round trip
// between awake ranks costs well under a microsecond), then sleep on a futex
// of the shared word, so that more ranks than cores do not burn each other's
// time slices. Every wait ends at a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace neuroncoll::transport {

// One rank's published progress. Lives in shared memory (lock-free atomics
// are address-free, so every mapping sees one word).
struct alignas(64) Flag {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};  // ranks in futex_wait on `value`
};

// Wrap-safe "a has reached b" for 32-bit step counters.
inline bool reached(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) >= 0; }

// Publishes `value` and wakes sleepers.
void post(Flag& flag, uint32_t value);
// Adds one and wakes sleepers: a flag several ranks bump (a doorbell).
void ring(Flag& flag);
// Without waiting: has `flag` reached `target`? Orders like a completed wait.
bool test_reached(Flag& flag, uint32_t target);

// Waits until `flag` reached `target`, `deadline` passed or `*stop` (if
// given) became true (seen within a sleep slice, 20 ms); true if reached.
bool wait_reached(Flag& flag, uint32_t target, std::chrono::steady_clock::time_point deadline,
                  const std::atomic<bool>* stop = nullptr);

}  // namespace neuroncoll::transport
