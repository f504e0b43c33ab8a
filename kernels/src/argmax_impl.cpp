// argmax over rows on one instruction set (see argmax.hpp for what and why).
//
// Two passes over a row, both in vectors of the level's width: the maximum
// (four independent vectors of running maxima, so the loads are not one
// serial chain; a lane that sees a NaN remembers it), then the first element
// equal to it, a vector at a time until one matches. A row of logits stays in
// L2 between the passes.
#include <cstdint>
#include <limits>

#include "rows_impl.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

#include "element_vectors.hpp"

constexpr int64_t kLanes = NK_VEC_LANES;
typedef int32_t vmask __attribute__((vector_size(NK_VEC_LANES * 4)));

inline bool any(vmask m) {
  const vmask none{};
  return __builtin_memcmp(&m, &none, sizeof m) != 0;
}

template <DType D>
int64_t argmax_row(const typename Elem<D>::Storage* row, int64_t n) {
  using E = Elem<D>;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const vecf lowest = vecf{} - kInf;
  vecf best[4] = {lowest, lowest, lowest, lowest};
  vmask nan{};
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    for (int k = 0; k < 4; ++k) {
      const vecf v = E::load_vec(row + i + k * kLanes);
      nan |= v != v;
      best[k] = v > best[k] ? v : best[k];
    }
  }
  for (; i + kLanes <= n; i += kLanes) {
    const vecf v = E::load_vec(row + i);
    nan |= v != v;
    best[0] = v > best[0] ? v : best[0];
  }
  float top = -kInf;
  bool has_nan = any(nan);
  for (int k = 0; k < 4; ++k) {
    for (int64_t j = 0; j < kLanes; ++j) top = best[k][j] > top ? best[k][j] : top;
  }
  for (int64_t t = i; t < n; ++t) {
    const float v = E::load(row + t);
    has_nan |= v != v;
    top = v > top ? v : top;
  }
  // The first element that is the maximum, or a NaN.
  i = 0;
  if (has_nan) {
    for (; i + kLanes <= n; i += kLanes) {
      const vecf v = E::load_vec(row + i);
      if (any(v != v)) break;
    }
    for (; i < n; ++i) {
      const float v = E::load(row + i);
      if (v != v) return i;
    }
  } else {
    const vecf wanted = vecf{} + top;
    for (; i + kLanes <= n; i += kLanes) {
      if (any(E::load_vec(row + i) == wanted)) break;
    }
    for (; i < n; ++i) {
      if (E::load(row + i) == top) return i;
    }
  }
  return 0;  // not reached: the maximum is in the row
}

template <DType D>
void rows_of(const ArgmaxParams& p, const ParallelFor& parallel_for) {
  const auto* x = static_cast<const typename Elem<D>::Storage*>(p.x);
  parallel_for(p.rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) p.out[r] = argmax_row<D>(x + r * p.row_stride, p.cols);
  });
}

}  // namespace

void argmax_rows(const ArgmaxParams& p, const ParallelFor& parallel_for) {
  switch (p.dtype) {
    case DType::kFloat32: return rows_of<DType::kFloat32>(p, parallel_for);
    case DType::kBFloat16: return rows_of<DType::kBFloat16>(p, parallel_for);
    case DType::kFloat16: return rows_of<DType::kFloat16>(p, parallel_for);
  }
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
