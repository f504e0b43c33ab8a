// Skinny matmul on one instruction set (see matmul.hpp for what and why).
//
// x is converted to float32 once per call (M*K is small); w is read in its
// own type, converted in registers, and every row of x is multiplied with it
// while it is there. Two layouts of w:
//  - "nt" (nn.Linear weights, each output column contiguous along K): a tile
//    is up to kMaxRows rows of x by kTileCols columns; each accumulator is a
//    vector of partial sums along K, summed across lanes at the end.
//  - "nn" (row-major [K, N]): a tile is up to kMaxRows rows by 64 columns;
//    each row of w contributes x[i, k] times 64 contiguous weights.
// Threads split the columns, so each thread streams its own part of w.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "matmul_impl.hpp"
#include "numeric.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

typedef float vec16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef _Float16 h16x16 __attribute__((vector_size(32)));

// Rows of x per tile: their accumulators must fit the vector registers
// (32 zmm on AVX-512; on narrower sets a vec16 takes two or four registers).
#if NK_VEC_LANES == 16
constexpr int kMaxRows = 4;
#else
constexpr int kMaxRows = 2;
#endif
constexpr int kTileCols = 4;    // "nt": output columns per tile (lane_sums4 folds four)
constexpr int kWideCols = 64;   // "nn": output columns per tile (4 vectors)

inline vec16 load16(const float* p) {
  vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Sixteen consecutive elements of storage type T as float32.
template <class T>
inline vec16 load_vec(const typename T::Storage* p);
template <>
inline vec16 load_vec<F32>(const float* p) { return load16(p); }
template <>
inline vec16 load_vec<BF16>(const uint16_t* p) {
  u16x16 h;
  std::memcpy(&h, p, sizeof h);
  const u32x16 bits = __builtin_convertvector(h, u32x16) << 16;
  vec16 v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
template <>
inline vec16 load_vec<F16>(const uint16_t* p) {
  h16x16 h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, vec16);
}

typedef int32_t i32x16 __attribute__((vector_size(64)));

// The lane sums of four accumulators at once: pairwise shuffles fold them
// into one vector (four times fewer adds than summing each on its own).
inline void lane_sums4(const vec16 a[4], float out[4]) {
  const i32x16 lo = {0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29};
  const i32x16 hi = {2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31};
  // Lanes (4q + r) of ab hold partial sums of a[0] (r even) and a[1] (r odd).
  const vec16 ab = __builtin_shuffle(a[0], a[1], lo) + __builtin_shuffle(a[0], a[1], hi);
  const vec16 cd = __builtin_shuffle(a[2], a[3], lo) + __builtin_shuffle(a[2], a[3], hi);
  const i32x16 even = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
  const i32x16 odd = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
  // Lane (4q + j) of abcd holds a partial sum of a[j].
  const vec16 abcd = __builtin_shuffle(ab, cd, even) + __builtin_shuffle(ab, cd, odd);
  float l[16];
  std::memcpy(l, &abcd, sizeof l);
  for (int j = 0; j < 4; ++j) out[j] = (l[j] + l[4 + j]) + (l[8 + j] + l[12 + j]);
}

// The next tile's weights are fetched while this tile computes: with
// several rows of x the arithmetic per weight is long enough that waiting
// for memory at each tile's start would not overlap it.
inline void prefetch_line(const void* p) { __builtin_prefetch(p, 0, 0); }

template <class T>
const typename T::Storage* as(const void* p) {
  return static_cast<const typename T::Storage*>(p);
}

struct Problem {
  const SkinnyMatmulParams& p;
  const float* xf;  // x as float32, [M, K] contiguous
  int64_t M, K, N;
};

// Writes acc (row i, column n) plus the bias to y.
template <class T>
inline void store_out(const Problem& pr, int64_t m, int64_t n, float acc) {
  const SkinnyMatmulParams& p = pr.p;
  if (p.bias.data) acc += T::load(as<T>(p.bias.data) + m * p.bias.row_stride + n * p.bias.col_stride);
  auto* y = static_cast<typename T::Storage*>(p.y.data);
  T::store(y + m * p.y.row_stride + n, acc);
}

// "nt": columns n0 .. n0+kTileCols (clamped to nend) for rows m0 .. m0+MR.
template <class T, int MR>
void nt_tile(const Problem& pr, int64_t m0, int64_t n0, int64_t nend) {
  const int64_t K = pr.K, ld = pr.p.w.col_stride;
  const auto* w = as<T>(pr.p.w.data);
  const typename T::Storage *wr[kTileCols], *next[kTileCols];
  for (int j = 0; j < kTileCols; ++j) {
    wr[j] = w + std::min(n0 + j, nend - 1) * ld;
    next[j] = w + std::min(n0 + kTileCols + j, nend - 1) * ld;
  }
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = pr.xf + (m0 + i) * K;

  vec16 acc[MR][kTileCols] = {};
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    vec16 wv[kTileCols];
    for (int j = 0; j < kTileCols; ++j) {
      wv[j] = load_vec<T>(wr[j] + k);
      prefetch_line(next[j] + k);
    }
    for (int i = 0; i < MR; ++i) {
      const vec16 xv = load16(xr[i] + k);
      for (int j = 0; j < kTileCols; ++j) acc[i][j] += xv * wv[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float sums[kTileCols];
    lane_sums4(acc[i], sums);
    for (int j = 0; j < kTileCols && n0 + j < nend; ++j) {
      float s = sums[j];
      for (int64_t kk = k; kk < K; ++kk) s += xr[i][kk] * T::load(wr[j] + kk);
      store_out<T>(pr, m0 + i, n0 + j, s);
    }
  }
}

#if NK_ISA_LEVEL == 3
// "nt" for bfloat16 on CPUs with AVX512_BF16: vdpbf16ps multiplies 32
// bfloat16 pairs and adds them into 16 float32 lanes — no conversion, and
// twice the multiply-adds of an FMA. (Like oneDNN's bfloat16 GEMM, which
// PyTorch's CPU matmul uses, it treats subnormal inputs as zero.)
template <int MR>
void nt_tile_bf16_dot(const Problem& pr, int64_t m0, int64_t n0, int64_t nend) {
  const int64_t K = pr.K, ld = pr.p.w.col_stride;
  const auto* w = as<BF16>(pr.p.w.data);
  const auto* x = as<BF16>(pr.p.x.data);
  const uint16_t *wr[kTileCols], *next[kTileCols];
  for (int j = 0; j < kTileCols; ++j) {
    wr[j] = w + std::min(n0 + j, nend - 1) * ld;
    next[j] = w + std::min(n0 + kTileCols + j, nend - 1) * ld;
  }
  const uint16_t* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + (m0 + i) * pr.p.x.row_stride;

  __m512 acc[MR][kTileCols];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < kTileCols; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh wv[kTileCols];
    for (int j = 0; j < kTileCols; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(wr[j] + k);
      prefetch_line(next[j] + k);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xr[i] + k);
      for (int j = 0; j < kTileCols; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    vec16 a[kTileCols];
    std::memcpy(a, acc[i], sizeof a);
    float sums[kTileCols];
    lane_sums4(a, sums);
    for (int j = 0; j < kTileCols && n0 + j < nend; ++j) {
      float s = sums[j];
      for (int64_t kk = k; kk < K; ++kk) s += pr.xf[(m0 + i) * K + kk] * BF16::load(wr[j] + kk);
      store_out<BF16>(pr, m0 + i, n0 + j, s);
    }
  }
}
#endif

// "nn": columns n0 .. n0+kWideCols (all inside y) for rows m0 .. m0+MR.
template <class T, int MR>
void nn_tile(const Problem& pr, int64_t m0, int64_t n0) {
  const int64_t K = pr.K, ld = pr.p.w.row_stride;
  const auto* w = as<T>(pr.p.w.data) + n0;
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = pr.xf + (m0 + i) * K;

  constexpr int kVecs = kWideCols / 16;
  vec16 acc[MR][kVecs] = {};
  for (int64_t k = 0; k < K; ++k) {
    vec16 wv[kVecs];
    for (int c = 0; c < kVecs; ++c) wv[c] = load_vec<T>(w + k * ld + 16 * c);
    for (int i = 0; i < MR; ++i) {
      const float xk = xr[i][k];
      for (int c = 0; c < kVecs; ++c) acc[i][c] += xk * wv[c];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float out[kWideCols];
    std::memcpy(out, acc[i], sizeof out);
    for (int c = 0; c < kWideCols; ++c) store_out<T>(pr, m0 + i, n0 + c, out[c]);
  }
}

// "nn" columns that do not fill a wide tile: one column at a time.
template <class T>
void nn_narrow(const Problem& pr, int64_t n0, int64_t nend) {
  const int64_t ld = pr.p.w.row_stride;
  const auto* w = as<T>(pr.p.w.data);
  for (int64_t m = 0; m < pr.M; ++m) {
    const float* x = pr.xf + m * pr.K;
    for (int64_t n = n0; n < nend; ++n) {
      float s = 0.0f;
      for (int64_t k = 0; k < pr.K; ++k) s += x[k] * T::load(w + k * ld + n);
      store_out<T>(pr, m, n, s);
    }
  }
}

// Runs tile<MR> for every group of rows, MR = kMaxRows except the last.
template <class T, class Tile>
void for_row_groups(const Problem& pr, Tile&& tile) {
  for (int64_t m0 = 0; m0 < pr.M; m0 += kMaxRows) {
    switch (std::min<int64_t>(kMaxRows, pr.M - m0)) {
      case 1: tile.template operator()<1>(m0); break;
      case 2: tile.template operator()<2>(m0); break;
#if NK_VEC_LANES == 16
      case 3: tile.template operator()<3>(m0); break;
      case 4: tile.template operator()<4>(m0); break;
#endif
    }
  }
}

template <class T>
void run(const Problem& pr, const ParallelFor& parallel_for) {
  const bool nt = pr.p.w.row_stride == 1;
  const int64_t unit = nt ? kTileCols : kWideCols;
  const int64_t units = (pr.N + unit - 1) / unit;
  parallel_for(units, [&](int64_t begin, int64_t end) {
    const int64_t nbeg = begin * unit, nend = std::min(end * unit, pr.N);
    if (nt) {
      for (int64_t n0 = nbeg; n0 < nend; n0 += kTileCols) {
#if NK_ISA_LEVEL == 3
        if constexpr (std::is_same_v<T, BF16>) {
          for_row_groups<T>(pr, [&]<int MR>(int64_t m0) { nt_tile_bf16_dot<MR>(pr, m0, n0, nend); });
          continue;
        }
#endif
        for_row_groups<T>(pr, [&]<int MR>(int64_t m0) { nt_tile<T, MR>(pr, m0, n0, nend); });
      }
      return;
    }
    int64_t n0 = nbeg;
    for (; n0 + kWideCols <= nend; n0 += kWideCols) {
      for_row_groups<T>(pr, [&]<int MR>(int64_t m0) { nn_tile<T, MR>(pr, m0, n0); });
    }
    nn_narrow<T>(pr, n0, nend);
  });
}

}  // namespace

void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& parallel_for) {
  const int64_t M = p.x.rows, K = p.x.cols, N = p.w.cols;
  if (M == 0 || N == 0) return;
  std::vector<float> xf(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m) {
    const char* row = static_cast<const char*>(p.x.data) +
                      m * p.x.row_stride * int64_t(dtype_size(p.x.dtype));
    load_f32(row, p.x.dtype, 1, K, xf.data() + m * K);
  }
  const Problem pr{p, xf.data(), M, K, N};
  switch (p.x.dtype) {
    case DType::kFloat32: return run<F32>(pr, parallel_for);
    case DType::kBFloat16: return run<BF16>(pr, parallel_for);
    case DType::kFloat16: return run<F16>(pr, parallel_for);
  }
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
