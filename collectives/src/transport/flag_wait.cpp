#include "flag_wait.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace neuroncoll::transport {
namespace {

// Long enough to catch a peer that is a few microseconds behind, short
// enough that a rank waiting for a descheduled peer gives up its core soon.
constexpr auto kSpin = std::chrono::microseconds(30);
// Sleep slices: a lost wake-up (none are expected) costs at most this.
constexpr auto kMaxSleep = std::chrono::milliseconds(20);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Ranks that are threads of one process map the control segment at different
// addresses, so ThreadSanitizer cannot pair a post with its wait and reports
// the data they order (arena buffers, seen at one address) as races. Under
// TSan every post releases, and every completed wait acquires, one
// process-wide address.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
char tsan_sync;
inline void tsan_release() { __tsan_release(&tsan_sync); }
inline void tsan_acquire() { __tsan_acquire(&tsan_sync); }
#else
inline void tsan_release() {}
inline void tsan_acquire() {}
#endif

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void wake_sleepers(Flag& flag) {
  if (flag.sleepers.load(std::memory_order_seq_cst) != 0) {
    futex(&flag.value, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

}  // namespace

void post(Flag& flag, uint32_t value) {
  tsan_release();
  flag.value.store(value, std::memory_order_seq_cst);
  wake_sleepers(flag);
}

void ring(Flag& flag) {
  tsan_release();
  flag.value.fetch_add(1, std::memory_order_seq_cst);
  wake_sleepers(flag);
}

bool test_reached(Flag& flag, uint32_t target) {
  if (!reached(flag.value.load(std::memory_order_acquire), target)) return false;
  tsan_acquire();
  return true;
}

bool wait_reached(Flag& flag, uint32_t target, std::chrono::steady_clock::time_point deadline,
                  const std::atomic<bool>* stop) {
  using clock = std::chrono::steady_clock;
  if (reached(flag.value.load(std::memory_order_acquire), target)) {
    tsan_acquire();
    return true;
  }
  const auto spin_end = clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (reached(flag.value.load(std::memory_order_acquire), target)) {
      tsan_acquire();
      return true;
    }
    cpu_relax();
    if ((i & 63) == 0 && clock::now() >= spin_end) break;
  }
  flag.sleepers.fetch_add(1, std::memory_order_seq_cst);
  bool ok = false;
  for (;;) {
    uint32_t seen = flag.value.load(std::memory_order_seq_cst);
    if (reached(seen, target)) {
      ok = true;
      break;
    }
    const auto now = clock::now();
    if (now >= deadline || (stop && stop->load(std::memory_order_relaxed))) break;
    auto slice = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    if (slice > kMaxSleep) slice = kMaxSleep;
    timespec ts{static_cast<time_t>(slice.count() / 1000000000),
                static_cast<long>(slice.count() % 1000000000)};
    futex(&flag.value, FUTEX_WAIT, seen, &ts);
  }
  flag.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  if (ok) tsan_acquire();
  return ok;
}

}  // namespace neuroncoll::transport
