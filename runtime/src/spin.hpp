// Busy-wait helpers for the runtime's threads (stream workers, compute
// helpers), which spin briefly before sleeping.
#pragma once

namespace neuronrt::detail {

// Tells the CPU this is a spin-wait loop (saves power, frees the sibling
// hyperthread).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace neuronrt::detail
