// Row norms on one instruction set (see norm.hpp for what and why).
//
// Each row is converted to float32 once into a per-thread buffer (a row of a
// few thousand columns stays in L1 for the passes over it); the statistics
// are sums over vectors of the level's width (LayerNorm's variance around the
// mean, in a second pass, as ATen computes it), and the output is rounded
// once per element (twice where Hugging Face's RMSNorm rounds the normalized
// value before the weight).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rows_impl.hpp"
#include "numeric.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

#include "attention_vec.hpp"
#include "element_vectors.hpp"

// n elements from p (of type t) as float32 into dst, zero-padded to whole vectors.
void to_f32(const void* p, DType t, int64_t n, float* dst) {
  load_row(p, t, n, dst);
  const int64_t padded = (n + kLanes - 1) / kLanes * kLanes;
  for (int64_t i = n; i < padded; ++i) dst[i] = 0.0f;
}

// row[i] = (row[i] - mean) * rstd rounded to D, over whole vectors.
template <DType D>
void normalize_rounded(float* row, int64_t padded, vec m, vec s) {
  for (int64_t i = 0; i < padded; i += kLanes) vstore(row + i, Elem<D>::round_vec((vload(row + i) - m) * s));
}

float sum(const float* a, int64_t n) {  // n a multiple of kLanes
  vec s0{}, s1{};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 += vload(a + i);
    s1 += vload(a + i + kLanes);
  }
  for (; i < n; i += kLanes) s0 += vload(a + i);
  return hsum(s0 + s1);
}

float sum_squares(const float* a, int64_t n, float center) {  // padded lanes must read as `center`
  vec s0{}, s1{};
  const vec c = vsplat(center);
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    const vec d0 = vload(a + i) - c, d1 = vload(a + i + kLanes) - c;
    s0 += d0 * d0;
    s1 += d1 * d1;
  }
  for (; i < n; i += kLanes) {
    const vec d = vload(a + i) - c;
    s0 += d * d;
  }
  return hsum(s0 + s1);
}

void norm_row(const RowNormParams& p, int64_t r, float* row, float* w, float* b) {
  const int64_t C = p.cols;
  const int64_t padded = (C + kLanes - 1) / kLanes * kLanes;
  const void* x = static_cast<const char*>(p.x.data) + r * p.x.stride * int64_t(dtype_size(p.x.dtype));
  to_f32(x, p.x.dtype, C, row);
  float mean = 0.0f;
  if (p.subtract_mean) {
    mean = sum(row, padded) / float(C);
    for (int64_t i = C; i < padded; ++i) row[i] = mean;  // padding adds nothing to the variance
  }
  const float var = C > 0 ? sum_squares(row, padded, mean) / float(C) : 0.0f;
  const float rstd = 1.0f / std::sqrt(var + p.eps);
  if (p.mean) store_one(p.mean, p.stat_dtype, r, mean);
  if (p.rstd) store_one(p.rstd, p.stat_dtype, r, rstd);
  void* y = static_cast<char*>(p.y.data) + r * p.y.stride * int64_t(dtype_size(p.y.dtype));
  const vec m = vsplat(mean), s = vsplat(rstd);
  if (p.round_normalized && p.normalized_dtype == DType::kBFloat16) {
    normalize_rounded<DType::kBFloat16>(row, padded, m, s);
  } else if (p.round_normalized && p.normalized_dtype == DType::kFloat16) {
    normalize_rounded<DType::kFloat16>(row, padded, m, s);
  } else {
    for (int64_t i = 0; i < padded; i += kLanes) vstore(row + i, (vload(row + i) - m) * s);
  }
  if (w) for (int64_t i = 0; i < padded; i += kLanes) vstore(row + i, vload(row + i) * vload(w + i));
  if (b) for (int64_t i = 0; i < padded; i += kLanes) vstore(row + i, vload(row + i) + vload(b + i));
  store_row(row, C, p.y.dtype, y);
}

}  // namespace

void row_norm(const RowNormParams& p, const ParallelFor& pf) {
  const int64_t C = p.cols;
  const int64_t padded = (C + kLanes - 1) / kLanes * kLanes;
  // Weight and bias as float32 once per call, shared by every row.
  std::vector<float> wb(size_t(2 * padded), 0.0f);
  float* w = p.weight.data ? wb.data() : nullptr;
  float* b = p.bias.data ? wb.data() + padded : nullptr;
  if (w) to_f32(p.weight.data, p.weight.dtype, C, w);
  if (b) to_f32(p.bias.data, p.bias.dtype, C, b);
  const int64_t cost = std::max<int64_t>(1, C * 8);  // flops per row, roughly
  const int64_t min_rows = std::max<int64_t>(1, 32768 / cost);
  auto body = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(std::max(padded, kLanes)));
    for (int64_t r = r0; r < r1; ++r) norm_row(p, r, row.data(), w, b);
  };
  if (p.rows < 2 * min_rows) {
    body(0, p.rows);
  } else {
    pf(p.rows, body);
  }
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
