#include "isa.hpp"

namespace neuronkernels {
namespace {

Isa detect_isa() {
#if defined(__x86_64__) && defined(NK_HAVE_X86_VARIANTS)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::kAvx2;
#endif
  return Isa::kBaseline;
}

}  // namespace

bool has_avx512_bf16() {
#if defined(__x86_64__) && defined(NK_HAVE_X86_VARIANTS)
  static const bool yes = isa() == Isa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  return yes;
#else
  return false;
#endif
}

Isa isa() {
  static const Isa chosen = detect_isa();
  return chosen;
}

}  // namespace neuronkernels
