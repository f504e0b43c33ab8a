#include "csrc/runtime/BlockingWait.h"

#include <atomic>

namespace torchneuron {
namespace {
std::atomic<BlockingWaitHook> g_hook{nullptr};
}  // namespace

void set_blocking_wait_hook(BlockingWaitHook hook) { g_hook.store(hook, std::memory_order_release); }

void blocking_wait(const std::function<void()>& wait) {
  if (auto hook = g_hook.load(std::memory_order_acquire)) {
    hook(wait);
  } else {
    wait();
  }
}

}  // namespace torchneuron
