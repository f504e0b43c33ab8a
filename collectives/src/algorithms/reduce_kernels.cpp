// Reduction kernels: one plain loop per (dtype, op) over blocks of 256
// elements, accumulated in a local array (so `out` may alias a source).
// Compiled for baseline x86-64 with -O3; each (dtype, op) entry point is
// cloned by GCC for AVX2 and AVX-512 (target_clones, chosen by the loader from
// the CPU), and the templates it inlines are compiled for baseline only, so no
// shared inline code carries instructions the CPU may lack.
#include "reduce_kernels.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define NEURONCOLL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NEURONCOLL_CLONES
#endif
#define NEURONCOLL_INLINE inline __attribute__((always_inline))

namespace neuroncoll::algorithms {
namespace {

// float16 <-> float32 with integer and float operations only (the method of
// the FP16 library), branch-free so the loops vectorize without F16C.
NEURONCOLL_INLINE float h2f(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = std::bit_cast<float>((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t bits = two_w < (1u << 27) ? std::bit_cast<uint32_t>(denormalized)
                                           : std::bit_cast<uint32_t>(normalized);
  return std::bit_cast<float>(sign | bits);
}

NEURONCOLL_INLINE uint16_t f2h(float f) {
  float base = (std::fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = std::bit_cast<uint32_t>(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = std::bit_cast<uint32_t>(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

NEURONCOLL_INLINE float b2f(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

NEURONCOLL_INLINE uint16_t f2b(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x0040u) : rounded);
}

struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

// Storage type S, accumulation type Acc, and the conversions between them.
template <class S> struct Traits {
  using Acc = S;
  static NEURONCOLL_INLINE Acc load(S v) { return v; }
  static NEURONCOLL_INLINE S store(Acc v) { return v; }
};
template <> struct Traits<Half> {
  using Acc = float;
  static NEURONCOLL_INLINE float load(Half v) { return h2f(v.bits); }
  static NEURONCOLL_INLINE Half store(float v) { return {f2h(v)}; }
};
template <> struct Traits<BFloat16> {
  using Acc = float;
  static NEURONCOLL_INLINE float load(BFloat16 v) { return b2f(v.bits); }
  static NEURONCOLL_INLINE BFloat16 store(float v) { return {f2b(v)}; }
};

// Integer arithmetic that wraps (no signed overflow, no int promotion traps).
template <class T> NEURONCOLL_INLINE T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T> NEURONCOLL_INLINE T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

struct OpSum { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return wrap_add(a, b); } };
struct OpProd { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return wrap_mul(a, b); } };
struct OpMin { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return b < a ? b : a; } };
struct OpMax { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return a < b ? b : a; } };
struct OpAnd { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return static_cast<A>(a & b); } };
struct OpOr { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return static_cast<A>(a | b); } };
struct OpXor { template <class A> static NEURONCOLL_INLINE A apply(A a, A b) { return static_cast<A>(a ^ b); } };
struct OpAvg : OpSum {};
struct OpPremul : OpSum {};

template <class S, class Op>
NEURONCOLL_INLINE void reduce_impl(S* out, const S* const* srcs, const double* scales, int n,
                                   size_t count, int divisor) {
  using T = Traits<S>;
  using A = typename T::Acc;
  constexpr size_t kBlock = 256;
  A acc[kBlock];
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t m = count - base < kBlock ? count - base : kBlock;
    const S* s0 = srcs[0] + base;
    if constexpr (std::is_same_v<Op, OpPremul>) {
      const A f = static_cast<A>(scales[0]);
      for (size_t i = 0; i < m; ++i) acc[i] = T::load(s0[i]) * f;
    } else {
      for (size_t i = 0; i < m; ++i) acc[i] = T::load(s0[i]);
    }
    for (int j = 1; j < n; ++j) {
      const S* s = srcs[j] + base;
      if constexpr (std::is_same_v<Op, OpPremul>) {
        const A f = static_cast<A>(scales[j]);
        for (size_t i = 0; i < m; ++i) acc[i] = acc[i] + T::load(s[i]) * f;
      } else {
        for (size_t i = 0; i < m; ++i) acc[i] = Op::apply(acc[i], T::load(s[i]));
      }
    }
    if constexpr (std::is_same_v<Op, OpAvg>) {
      if constexpr (std::is_integral_v<A>) {
        const int64_t d = divisor;
        for (size_t i = 0; i < m; ++i) acc[i] = static_cast<A>(static_cast<int64_t>(acc[i]) / d);
      } else {
        const A d = static_cast<A>(divisor);
        for (size_t i = 0; i < m; ++i) acc[i] = acc[i] / d;
      }
    }
    S* o = out + base;
    for (size_t i = 0; i < m; ++i) o[i] = T::store(acc[i]);
  }
}

using Kernel = void (*)(void*, const void* const*, const double*, int, size_t, int);

#define NEURONCOLL_KERNEL(NAME, S, OP)                                                        \
  NEURONCOLL_CLONES void NAME(void* out, const void* const* srcs, const double* scales, int n, \
                              size_t count, int divisor) {                                    \
    reduce_impl<S, OP>(static_cast<S*>(out), reinterpret_cast<const S* const*>(srcs), scales, \
                       n, count, divisor);                                                    \
  }

// The ops of every numeric type, then those of floating and integer types.
#define NEURONCOLL_COMMON_KERNELS(P, S)  \
  NEURONCOLL_KERNEL(P##_sum, S, OpSum)   \
  NEURONCOLL_KERNEL(P##_avg, S, OpAvg)   \
  NEURONCOLL_KERNEL(P##_prod, S, OpProd) \
  NEURONCOLL_KERNEL(P##_min, S, OpMin)   \
  NEURONCOLL_KERNEL(P##_max, S, OpMax)
#define NEURONCOLL_FLOAT_KERNELS(P, S) \
  NEURONCOLL_COMMON_KERNELS(P, S)      \
  NEURONCOLL_KERNEL(P##_premul, S, OpPremul)
#define NEURONCOLL_INT_KERNELS(P, S)   \
  NEURONCOLL_COMMON_KERNELS(P, S)      \
  NEURONCOLL_KERNEL(P##_and, S, OpAnd) \
  NEURONCOLL_KERNEL(P##_or, S, OpOr)   \
  NEURONCOLL_KERNEL(P##_xor, S, OpXor)

NEURONCOLL_FLOAT_KERNELS(f32, float)
NEURONCOLL_FLOAT_KERNELS(f64, double)
NEURONCOLL_FLOAT_KERNELS(f16, Half)
NEURONCOLL_FLOAT_KERNELS(bf16, BFloat16)
NEURONCOLL_INT_KERNELS(i8, int8_t)
NEURONCOLL_INT_KERNELS(i16, int16_t)
NEURONCOLL_INT_KERNELS(i32, int32_t)
NEURONCOLL_INT_KERNELS(i64, int64_t)
NEURONCOLL_INT_KERNELS(u8, uint8_t)
// bool (bytes 0/1): SUM and MAX are OR, PRODUCT and MIN are AND.
NEURONCOLL_KERNEL(b_and, uint8_t, OpAnd)
NEURONCOLL_KERNEL(b_or, uint8_t, OpOr)
NEURONCOLL_KERNEL(b_xor, uint8_t, OpXor)

// Indexed by ReduceOp: SUM AVG PRODUCT MIN MAX PREMUL_SUM BAND BOR BXOR.
#define NEURONCOLL_FLOAT_ROW(P) {P##_sum, P##_avg, P##_prod, P##_min, P##_max, P##_premul, nullptr, nullptr, nullptr}
#define NEURONCOLL_INT_ROW(P) {P##_sum, P##_avg, P##_prod, P##_min, P##_max, nullptr, P##_and, P##_or, P##_xor}

// Indexed by DType (the enum's order).
const Kernel kKernels[kNumDTypes][kNumReduceOps] = {
    NEURONCOLL_FLOAT_ROW(f32),
    NEURONCOLL_FLOAT_ROW(f64),
    NEURONCOLL_FLOAT_ROW(f16),
    NEURONCOLL_FLOAT_ROW(bf16),
    NEURONCOLL_INT_ROW(i8),
    NEURONCOLL_INT_ROW(i16),
    NEURONCOLL_INT_ROW(i32),
    NEURONCOLL_INT_ROW(i64),
    NEURONCOLL_INT_ROW(u8),
    {b_or, nullptr, b_and, b_and, b_or, nullptr, b_and, b_or, b_xor},
};

}  // namespace

void reduce(DType dtype, ReduceOp op, void* out, const void* const* srcs, const double* scales,
            int num_srcs, size_t count, int divisor) {
  kKernels[static_cast<int>(dtype)][static_cast<int>(op)](out, srcs, scales, num_srcs, count,
                                                           divisor);
}

float half_to_float(uint16_t h) { return h2f(h); }
uint16_t float_to_half(float f) { return f2h(f); }
float bfloat16_to_float(uint16_t b) { return b2f(b); }
uint16_t float_to_bfloat16(float f) { return f2b(f); }

}  // namespace neuroncoll::algorithms
