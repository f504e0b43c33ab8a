// Element conversions and a vectorizable exp for the kernels' inner loops.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "neuronkernels/types.hpp"

namespace neuronkernels {

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

// Round to nearest even, as PyTorch's c10::BFloat16 does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) { return float(std::bit_cast<_Float16>(h)); }
inline uint16_t f32_to_f16(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }

// Element access by storage type: float, or the 16-bit formats as uint16_t.
struct F32 {
  using Storage = float;
  static float load(const float* p) { return *p; }
  static void store(float* p, float v) { *p = v; }
};
struct BF16 {
  using Storage = uint16_t;
  static float load(const uint16_t* p) { return bf16_to_f32(*p); }
  static void store(uint16_t* p, float v) { *p = f32_to_bf16(v); }
};
struct F16 {
  using Storage = uint16_t;
  static float load(const uint16_t* p) { return f16_to_f32(*p); }
  static void store(uint16_t* p, float v) { *p = f32_to_f16(v); }
};

// Loads n elements spaced `stride` apart into dst (float32).
inline void load_f32(const void* src, DType t, int64_t stride, int64_t n, float* dst) {
  switch (t) {
    case DType::kFloat32: {
      const float* s = static_cast<const float*>(src);
      if (stride == 1) {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = s[i * stride];
      }
      return;
    }
    case DType::kBFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i * stride]);
      return;
    }
    case DType::kFloat16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i * stride]);
      return;
    }
  }
}

// Stores n float32 values, spaced `stride` apart, as dtype t, each times `mul`.
inline void store_f32(void* dst, DType t, int64_t stride, int64_t n, const float* src, float mul) {
  switch (t) {
    case DType::kFloat32: {
      float* d = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = src[i] * mul;
      return;
    }
    case DType::kBFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = f32_to_bf16(src[i] * mul);
      return;
    }
    case DType::kFloat16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i * stride] = f32_to_f16(src[i] * mul);
      return;
    }
  }
}

inline size_t dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }

// Element i of a buffer of type t, as float32.
inline float load_one(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kBFloat16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kFloat16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
  return 0.0f;
}

// Stores v as element i of a buffer of type t (rounded to nearest even).
inline void store_one(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kFloat32: static_cast<float*>(p)[i] = v; return;
    case DType::kBFloat16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(v); return;
    case DType::kFloat16: static_cast<uint16_t*>(p)[i] = f32_to_f16(v); return;
  }
}

// v rounded to type t, as float32 (what storing and reloading it gives).
inline float round_to(float v, DType t) {
  switch (t) {
    case DType::kFloat32: return v;
    case DType::kBFloat16: return bf16_to_f32(f32_to_bf16(v));
    case DType::kFloat16: return f16_to_f32(f32_to_f16(v));
  }
  return v;
}

inline const char* at_element(const View4& v, int64_t a, int64_t b, int64_t c, int64_t d) {
  return static_cast<const char*>(v.data) + v.offset(a, b, c, d) * int64_t(dtype_size(v.dtype));
}

// exp(x) to about 1 ulp over the float range, branch-free so loops over it
// vectorize: Cody-Waite reduction to |r| <= ln2/2, a degree-6 polynomial,
// and the exponent put back by integer arithmetic. exp(-inf) is 0.
inline float exp_f32(float x) {
  const float lo = -87.33654f, hi = 88.0f;  // 2^n stays a normal float
  float xc = x < lo ? lo : (x > hi ? hi : x);
  float n = xc * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to nearest (|n| < 2^22)
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float poly = 1.3888889e-3f;
  poly = poly * r + 8.3333338e-3f;
  poly = poly * r + 4.1666668e-2f;
  poly = poly * r + 1.6666667e-1f;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  int32_t e = static_cast<int32_t>(n) + 127;
  float scale = std::bit_cast<float>(e << 23);
  float y = poly * scale;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;  // NaN in, NaN out
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace neuronkernels
