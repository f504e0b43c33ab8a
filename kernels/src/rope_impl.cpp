// Rotary embedding on one instruction set (see rope.hpp for what and why).
//
// A row is D elements of x with its rows of cos and sin. The two halves are
// computed in vectors (x1 * c1 - x2 * s1 and x2 * c2 + x1 * s2, each product
// rounded on its own: this file is built without contraction into fused
// multiply-adds). Float32 rows are read in place; other types are converted
// to float32 row by row, and each product and the sum are rounded to the
// output's type, as eager's separate multiplications and addition round.
#include <cstdint>
#include <cstring>
#include <vector>

#include "numeric.hpp"
#include "rows_impl.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

#include "attention_vec.hpp"
#include "element_vectors.hpp"

// The sines the two halves take: (s1, s2) forward; (-s2, -s1) backward, which
// turns the forward's formula into the transposed rotation (rope.hpp). The
// negations are exact, and rounding to nearest is symmetric, so each product
// rounds as the backward graph's g * sin does.
template <bool kBackward>
inline vec vsine1(const float* s, int64_t half, int64_t i) {
  return kBackward ? -vload(s + half + i) : vload(s + i);
}
template <bool kBackward>
inline vec vsine2(const float* s, int64_t half, int64_t i) {
  return kBackward ? -vload(s + i) : vload(s + half + i);
}
template <bool kBackward>
inline float sine1(const float* s, int64_t half, int64_t i) {
  return kBackward ? -s[half + i] : s[i];
}
template <bool kBackward>
inline float sine2(const float* s, int64_t half, int64_t i) {
  return kBackward ? -s[i] : s[half + i];
}

// out[i] = x[i] * c[i] + r[i] * s[i], r = (-x2, x1), every operation rounded.
template <bool kBackward>
void rope_row_f32(const float* x, const float* c, const float* s, float* out, int64_t half) {
  int64_t i = 0;
  for (; i + kLanes <= half; i += kLanes) {
    const vec x1 = vload(x + i), x2 = vload(x + half + i);
    const vec a1 = x1 * vload(c + i), b1 = x2 * vsine1<kBackward>(s, half, i);
    const vec a2 = x2 * vload(c + half + i), b2 = x1 * vsine2<kBackward>(s, half, i);
    vstore(out + i, a1 - b1);  // x1*c + (-x2)*s: the negation is exact
    vstore(out + half + i, a2 + b2);
  }
  for (; i < half; ++i) {
    const float a1 = x[i] * c[i], b1 = x[half + i] * sine1<kBackward>(s, half, i);
    const float a2 = x[half + i] * c[half + i], b2 = x[i] * sine2<kBackward>(s, half, i);
    out[i] = a1 - b1;
    out[half + i] = a2 + b2;
  }
}

// The same for any types: x, cos and sin rows converted into f (3 x D
// floats), every product rounded to O, the output's type.
template <DType O, bool kBackward>
void rope_row_rounded(const RopeParams& p, const char* x, const char* c, const char* s, char* out, int64_t half,
                      float* f) {
  using E = Elem<O>;
  const int64_t D = 2 * half;
  float *fx = f, *fc = f + D, *fs = f + 2 * D;
  load_row(x, p.x.dtype, D, fx);
  load_row(c, p.cos.dtype, D, fc);
  load_row(s, p.sin.dtype, D, fs);
  auto* o = reinterpret_cast<typename E::Storage*>(out);
  int64_t i = 0;
  for (; i + kLanes <= half; i += kLanes) {
    const vec x1 = vload(fx + i), x2 = vload(fx + half + i);
    const vec a1 = E::round_vec(x1 * vload(fc + i)), b1 = E::round_vec(x2 * vsine1<kBackward>(fs, half, i));
    const vec a2 = E::round_vec(x2 * vload(fc + half + i)), b2 = E::round_vec(x1 * vsine2<kBackward>(fs, half, i));
    E::store_vec(o + i, a1 - b1);  // a1 + round(-x2 * s1): rounding to nearest is symmetric
    E::store_vec(o + half + i, a2 + b2);
  }
  for (; i < half; ++i) {
    const float x1 = fx[i], x2 = fx[half + i];
    const float a1 = round_to(x1 * fc[i], O), b1 = round_to(-x2 * sine1<kBackward>(fs, half, i), O);
    const float a2 = round_to(x2 * fc[half + i], O), b2 = round_to(x1 * sine2<kBackward>(fs, half, i), O);
    E::store(o + i, a1 + b1);
    E::store(o + half + i, a2 + b2);
  }
}

template <bool kBackward>
void rope_row(const RopeParams& p, const char* x, const char* c, const char* s, char* out, int64_t half,
              float* f) {
  switch (p.out.dtype) {
    case DType::kFloat32: return rope_row_rounded<DType::kFloat32, kBackward>(p, x, c, s, out, half, f);
    case DType::kBFloat16: return rope_row_rounded<DType::kBFloat16, kBackward>(p, x, c, s, out, half, f);
    case DType::kFloat16: return rope_row_rounded<DType::kFloat16, kBackward>(p, x, c, s, out, half, f);
  }
}

template <bool kBackward>
void rope_rows(const RopeParams& p, const ParallelFor& pf) {
  const auto& n = p.x.sizes;
  const int64_t rows = n[0] * n[1] * n[2], half = n[3] / 2;
  const bool all_f32 = p.x.dtype == DType::kFloat32 && p.cos.dtype == DType::kFloat32 &&
                       p.sin.dtype == DType::kFloat32 && p.out.dtype == DType::kFloat32;
  auto body = [&](int64_t r0, int64_t r1) {
    std::vector<float> converted(all_f32 ? 0 : size_t(6 * half));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t a = r / (n[1] * n[2]), b = r / n[2] % n[1], c = r % n[2];
      const char* x = at_element(p.x, a, b, c, 0);
      const char* cs = at_element(p.cos, a, b, c, 0);
      const char* sn = at_element(p.sin, a, b, c, 0);
      char* out = const_cast<char*>(at_element(p.out, a, b, c, 0));
      if (all_f32) {
        rope_row_f32<kBackward>(reinterpret_cast<const float*>(x), reinterpret_cast<const float*>(cs),
                                reinterpret_cast<const float*>(sn), reinterpret_cast<float*>(out), half);
      } else {
        rope_row<kBackward>(p, x, cs, sn, out, half, converted.data());
      }
    }
  };
  // A decode step's rotary embedding is a few hundred elements: threads only
  // for prefill-sized work.
  if (rows * n[3] < 65536) {
    if (rows > 0) body(0, rows);
  } else {
    pf(rows, body);
  }
}

}  // namespace

void rope(const RopeParams& p, const ParallelFor& pf) {
  if (p.backward) return rope_rows<true>(p, pf);
  rope_rows<false>(p, pf);
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
