// Skinny matmul on one instruction set (see matmul.hpp for what and why).
//
// x is converted to float32 once per call (M*K is small); w is read in its
// own type, converted in registers, and every row of x is multiplied with it
// while it is there. Two layouts of w:
//  - "nt" (nn.Linear weights, each output column contiguous along K): a tile
//    is up to NtShape::max_rows rows of x by NtShape::cols columns; each
//    accumulator is a vector of partial sums along K, summed across lanes at
//    the end.
//  - "nn" (row-major [K, N]): on AVX-512 a tile is up to kWideMaxRows rows
//    by kWideCols columns, each row of w contributing x[i, k] times
//    kWideCols contiguous weights; on the 16-register levels, strips of
//    columns summed in L1 (nn_strip).
// Vectors are one native register of the level (matmul_vectors.hpp) and tile
// sizes are chosen so that accumulators and operands fit the level's
// registers (16 on baseline and AVX2, 32 on AVX-512): a tile that spills
// turns each multiply-add into memory traffic. The AVX-512 configuration is
// the one tuned on an AVX-512 machine; the others were measured on an AVX2
// one (Zen 3).
// Threads split the columns, so each thread streams its own part of w.
#include <algorithm>
#include <cstdint>
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

#include "element_vectors.hpp"
#include "matmul_vectors.hpp"
#include "lane_folds.hpp"

// "nt" tiles: up to MaxRows rows of x by Cols columns of w (the unit the
// threads split). Accumulators and operands must fit the vector registers.
struct NtShape {
  int max_rows, cols;
};
#if NK_VEC_LANES == 16
// AVX-512: 4 x 4 accumulators, 4 weight vectors and one of x take 21 of 32;
// "nn" tiles of up to 4 rows by 4 vectors of columns.
constexpr NtShape kNtShape = {4, 4};
constexpr int kWideMaxRows = 4;
#else
// 16 registers. Three or more rows: 4 x 3 accumulators, 3 weight vectors
// and one of x. One row: 8 columns at once, whose 8 streams from memory came
// nearer the bandwidth than 3 (17 against 14 GB/s); two rows: 2 x 6.
constexpr NtShape kNtShape = {4, 3};
#endif

// "nt" with up to this many rows streams w column by column. Reading one
// column after another keeps each thread on one sequential stream, which the
// hardware prefetchers serve at the memory's bandwidth; tiles interleaving 3
// to 8 columns (several streams, software prefetch) reached about half of it
// on AMD Zen 3 and Zen 4, for 16-bit weights a third. With more rows the
// products, not the memory, bound the time, and the tiles' reuse of each x
// vector over several columns wins. Each row's product converts the column
// again (from L1), which costs bfloat16 two instructions per vector: measured
// on Zen 4 at AVX-512 and AVX2, streaming won at 3 and 4 rows by 20-50% for
// float32 and float16 and lost by up to 40% for bfloat16; at 5 and 8 rows the
// tiles won for every type.
template <DType D>
constexpr int64_t stream_max_rows() {
  return D == DType::kBFloat16 ? 2 : 4;
}
// float32 at AVX-512 on Intel CPUs streams every row count the kernel takes.
// On an Intel Xeon (2 cores) the tiles read the weight at 5.5-8.8 GB/s where
// streaming read it at 9.5-17 GB/s up to 16 rows: 5 to 16 rows went from
// 0.26-0.66x ATen's MKL to 0.90-2.04x (benchmarks/linear.py). 16-bit weights
// keep the tiles (float16 at 8 to 16 rows lost 20-30% streaming), and so does
// the AVX2 level, which was not measured against its tiles there.
template <DType D>
int64_t stream_rows() {
#if NK_VEC_LANES == 16
  static const bool intel = (__builtin_cpu_init(), __builtin_cpu_is("intel"));
  if (D == DType::kFloat32 && intel) return kSkinnyMaxRows;
#endif
  return stream_max_rows<D>();
}

// "nn": output columns per tile on AVX-512; the unit of columns threads split.
constexpr int kWideVecs = 4;
constexpr int kWideCols = kWideVecs * kLanes;

// How far ahead (elements) "nt" tiles prefetch each column. AVX-512: one
// whole tile (the same k of the next tile's column, as tuned there). With
// 16 registers: a fixed distance, since a tile ahead with long columns (K of
// 2048 and more) is more than L1 holds and the lines come twice.
template <DType D>
constexpr int64_t prefetch_ahead() {
  if (NK_VEC_LANES == 16) return INT64_MAX;
  return 1024 / int64_t(sizeof(typename Elem<D>::Storage));  // fastest of 512 B to 4 KB
}

template <DType D>
const typename Elem<D>::Storage* as(const void* p) {
  return static_cast<const typename Elem<D>::Storage*>(p);
}

struct Problem {
  const SkinnyMatmulParams& p;
  const float* xf;  // x as float32, [M, K] contiguous
  int64_t M, K, N;
};

// Writes acc (row m, column n) plus the bias to y.
template <DType D>
inline void store_out(const Problem& pr, int64_t m, int64_t n, float acc) {
  using E = Elem<D>;
  const SkinnyMatmulParams& p = pr.p;
  if (p.bias.data) acc += E::load(as<D>(p.bias.data) + m * p.bias.row_stride + n * p.bias.col_stride);
  auto* y = static_cast<typename E::Storage*>(p.y.data);
  E::store(y + m * p.y.row_stride + n, acc);
}

#if NK_VEC_LANES == 16
static_assert(kNtShape.max_rows * kNtShape.cols == kLanes);
// The outputs of a whole "nt" tile (4 rows by 4 columns, K a whole number of
// the loop's steps) at once: the 16 accumulators folded into one vector of
// their sums (lane 4i + j: row i, column j), the bias added, and each row's
// four columns rounded and stored together. Summing, rounding and storing
// each output on its own took about a third of a 768-long tile's
// instructions.
template <DType D>
inline void store_whole_tile(const Problem& pr, int64_t m0, int64_t n0, vecf* acc) {
  using E = Elem<D>;
  const SkinnyMatmulParams& p = pr.p;
  vecf sums = sums_of_lanes(acc);
  if (p.bias.data) {
    float bias[kLanes];
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        bias[4 * i + j] = E::load(as<D>(p.bias.data) + (m0 + i) * p.bias.row_stride + (n0 + j) * p.bias.col_stride);
      }
    }
    sums += load_f32x(bias);
  }
  typename E::Storage out[kLanes];
  E::store_vec(out, sums);
  auto* y = static_cast<typename E::Storage*>(p.y.data);
  for (int i = 0; i < 4; ++i) __builtin_memcpy(y + (m0 + i) * p.y.row_stride + n0, out + 4 * i, 4 * sizeof out[0]);
}
#endif

// "nt": columns n0 .. n0+NC (clamped to nend) for rows m0 .. m0+MR.
template <DType D, int MR, int NC>
void nt_tile(const Problem& pr, int64_t m0, int64_t n0, int64_t nend) {
  using E = Elem<D>;
  const int64_t K = pr.K, ld = pr.p.w.col_stride;
  const auto* w = as<D>(pr.p.w.data);
  const typename E::Storage *wr[NC], *next[NC];
  for (int j = 0; j < NC; ++j) {
    wr[j] = w + std::min(n0 + j, nend - 1) * ld;
    next[j] = w + std::min(n0 + NC + j, nend - 1) * ld;
  }
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = pr.xf + (m0 + i) * K;

  vecf acc[MR][NC];  // (zeroed one by one: "= {}" becomes a rep stos on the stack)
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NC; ++j) acc[i][j] = vecf{};
  }
  auto multiply_add = [&](int64_t k) {
    vecf wv[NC];
    for (int j = 0; j < NC; ++j) wv[j] = E::load_vec(wr[j] + k);
    for (int i = 0; i < MR; ++i) {
      const vecf xv = load_f32x(xr[i] + k);
      for (int j = 0; j < NC; ++j) acc[i][j] += xv * wv[j];
    }
  };
  // Each column's weights are prefetched `ahead` elements before use, the
  // stream running on into the same column of the next tile; one hint per
  // column and step (a line may be hinted more than once).
  const int64_t ahead = std::min(K, prefetch_ahead<D>());
  int64_t k = 0;
  for (; k + kLanes <= K && k + ahead < K; k += kLanes) {
    for (int j = 0; j < NC; ++j) prefetch_line(wr[j] + k + ahead);
    multiply_add(k);
  }
  for (; k + kLanes <= K; k += kLanes) {
    for (int j = 0; j < NC; ++j) prefetch_line(next[j] + (k + ahead - K));
    multiply_add(k);
  }
#if NK_VEC_LANES == 16
  if constexpr (MR * NC == kLanes) {
    if (k == K && n0 + NC <= nend) return store_whole_tile<D>(pr, m0, n0, &acc[0][0]);
  }
#endif
  float sums[(MR * NC + 3) / 4 * 4];
  lane_sums<MR * NC>(&acc[0][0], sums);
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NC && n0 + j < nend; ++j) {
      float s = sums[i * NC + j];
      for (int64_t kk = k; kk < K; ++kk) s += xr[i][kk] * E::load(wr[j] + kk);
      store_out<D>(pr, m0 + i, n0 + j, s);
    }
  }
}

// One row of x (float32) times one column of w, as a vector of partial sums
// over the first kv elements (a multiple of kLanes): two accumulators, so
// consecutive multiply-adds do not wait on each other.
template <DType D>
inline vecf column_dot(const float* x, const typename Elem<D>::Storage* w, int64_t kv) {
  using E = Elem<D>;
  vecf a0{}, a1{};
  int64_t k = 0;
  for (; k + 2 * kLanes <= kv; k += 2 * kLanes) {
    a0 += load_f32x(x + k) * E::load_vec(w + k);
    a1 += load_f32x(x + k + kLanes) * E::load_vec(w + k + kLanes);
  }
  if (k < kv) a0 += load_f32x(x + k) * E::load_vec(w + k);
  return a0 + a1;
}

// Column streams of bfloat16 weights ask for the lines 4 KB ahead of the
// column they start, when columns are short (a hidden size of up to 1024)
// and lie back to back: the hardware prefetchers then run far enough ahead.
// Interleaved A/B on an AMD Zen 5 (768-wide columns, 1 to 4 rows): 5-18%
// faster; 2048-wide columns 2-5% slower, float32 and float16 even.
constexpr int64_t kStreamPrefetchBytes = 4096;

inline bool prefetches_ahead(int64_t column_bytes, int64_t stride_bytes) {
  return column_bytes <= 2048 && stride_bytes == column_bytes;
}

// The lines of the column_bytes starting kStreamPrefetchBytes past `column`,
// up to `end` (the thread's last column).
inline void prefetch_ahead(const void* column, const void* end, int64_t column_bytes) {
  const char* from = static_cast<const char*>(column) + kStreamPrefetchBytes;
  const char* to = std::min(from + column_bytes, static_cast<const char*>(end));
  for (const char* line = from; line < to; line += 64) prefetch_line(line);
}

// "nt", columns n0 .. n1, every row (M <= stream_rows): each column is
// read from memory once, by the first row's dot product, and stays in L1 for
// the others; the rows' lane sums are folded together, four at a time.
template <DType D>
void nt_stream(const Problem& pr, int64_t n0, int64_t n1) {
  using E = Elem<D>;
  static_assert(kSkinnyMaxRows % 4 == 0, "lane_sums4 folds four rows");
  const int64_t K = pr.K, kv = K / kLanes * kLanes, ld = pr.p.w.col_stride;
  const auto* w = as<D>(pr.p.w.data);
  const bool prefetch = D == DType::kBFloat16 && prefetches_ahead(K * 2, ld * 2);
  for (int64_t n = n0; n < n1; ++n) {
    const auto* wc = w + n * ld;
    if (prefetch) prefetch_ahead(wc, w + n1 * ld, K * 2);
    // Rows up to the next multiple of 4 (what lane_sums4 reads); the rest
    // stay unset, so one row zeroes no more than four vectors.
    vecf part[kSkinnyMaxRows];
    for (int64_t m = 0; m < (pr.M + 3) / 4 * 4; ++m) {
      part[m] = m < pr.M ? column_dot<D>(pr.xf + m * K, wc, kv) : vecf{};
    }
    float sums[kSkinnyMaxRows];
    for (int64_t g = 0; g < pr.M; g += 4) lane_sums4(part + g, sums + g);
    for (int64_t m = 0; m < pr.M; ++m) {
      float s = sums[m];
      for (int64_t k = kv; k < K; ++k) s += pr.xf[m * K + k] * E::load(wc + k);
      store_out<D>(pr, m, n, s);
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
  using E = Elem<DType::kBFloat16>;
  const int64_t K = pr.K, ld = pr.p.w.col_stride;
  const auto* w = as<DType::kBFloat16>(pr.p.w.data);
  const auto* x = as<DType::kBFloat16>(pr.p.x.data);
  const uint16_t *wr[kNtShape.cols], *next[kNtShape.cols];
  for (int j = 0; j < kNtShape.cols; ++j) {
    wr[j] = w + std::min(n0 + j, nend - 1) * ld;
    next[j] = w + std::min(n0 + kNtShape.cols + j, nend - 1) * ld;
  }
  const uint16_t* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = x + (m0 + i) * pr.p.x.row_stride;

  __m512 acc[MR][kNtShape.cols];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < kNtShape.cols; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh wv[kNtShape.cols];
    for (int j = 0; j < kNtShape.cols; ++j) {
      wv[j] = (__m512bh)_mm512_loadu_si512(wr[j] + k);
      prefetch_line(next[j] + k);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xr[i] + k);
      for (int j = 0; j < kNtShape.cols; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  if constexpr (MR * kNtShape.cols == kLanes) {
    if (k == K && n0 + kNtShape.cols <= nend) {
      vecf a[kLanes];
      __builtin_memcpy(a, acc, sizeof a);
      return store_whole_tile<DType::kBFloat16>(pr, m0, n0, a);
    }
  }
  for (int i = 0; i < MR; ++i) {
    vecf a[kNtShape.cols];
    __builtin_memcpy(a, acc[i], sizeof a);
    float sums[kNtShape.cols];
    lane_sums4(a, sums);
    for (int j = 0; j < kNtShape.cols && n0 + j < nend; ++j) {
      float s = sums[j];
      for (int64_t kk = k; kk < K; ++kk) s += pr.xf[(m0 + i) * K + kk] * E::load(wr[j] + kk);
      store_out<DType::kBFloat16>(pr, m0 + i, n0 + j, s);
    }
  }
}
#endif

#if NK_VEC_LANES == 16
// "nn": columns n0 .. n0+kWideCols (all inside y) for rows m0 .. m0+MR.
template <DType D, int MR>
void nn_tile(const Problem& pr, int64_t m0, int64_t n0) {
  using E = Elem<D>;
  const int64_t K = pr.K, ld = pr.p.w.row_stride;
  const auto* w = as<D>(pr.p.w.data) + n0;
  const float* xr[MR];
  for (int i = 0; i < MR; ++i) xr[i] = pr.xf + (m0 + i) * K;

  vecf acc[MR][kWideVecs];
  for (int i = 0; i < MR; ++i) {
    for (int c = 0; c < kWideVecs; ++c) acc[i][c] = vecf{};
  }
  for (int64_t k = 0; k < K; ++k) {
    vecf wv[kWideVecs];
    for (int c = 0; c < kWideVecs; ++c) wv[c] = E::load_vec(w + k * ld + kLanes * c);
    for (int i = 0; i < MR; ++i) {
      const float xk = xr[i][k];
      for (int c = 0; c < kWideVecs; ++c) acc[i][c] += xk * wv[c];
    }
  }
  for (int i = 0; i < MR; ++i) {
    float out[kWideCols];
    __builtin_memcpy(out, acc[i], sizeof out);
    for (int c = 0; c < kWideCols; ++c) store_out<D>(pr, m0 + i, n0 + c, out[c]);
  }
}
#endif

// "nn" columns that do not fill a wide tile: one column at a time.
template <DType D>
void nn_narrow(const Problem& pr, int64_t n0, int64_t nend) {
  using E = Elem<D>;
  const int64_t ld = pr.p.w.row_stride;
  const auto* w = as<D>(pr.p.w.data);
  for (int64_t m = 0; m < pr.M; ++m) {
    const float* x = pr.xf + m * pr.K;
    for (int64_t n = n0; n < nend; ++n) {
      float s = 0.0f;
      for (int64_t k = 0; k < pr.K; ++k) s += x[k] * E::load(w + k * ld + n);
      store_out<D>(pr, m, n, s);
    }
  }
}

// "nn" by rows of w (16-register levels): each step adds kNnRowsPerStep
// rows of w, times x, into float32 sums of a strip of columns for every row
// of x, kept in L1 (kNnSums floats). Every stretch of w read is then one
// contiguous run of the strip's width: register tiles walking down the
// columns read 128 bytes per row of w instead, a page apart, which the
// hardware prefetchers and the TLB served at half of ATen's speed.
constexpr int64_t kNnSums = 4096;
constexpr int kNnRowsPerStep = 8;  // 8 streams from memory: faster than 2 or 4

template <DType D, int KU>
inline void nn_strip_step(const Problem& pr, int64_t n0, int64_t width, int64_t k, float* sums) {
  using E = Elem<D>;
  const int64_t ld = pr.p.w.row_stride;
  const typename E::Storage* wk[KU];
  for (int u = 0; u < KU; ++u) wk[u] = as<D>(pr.p.w.data) + (k + u) * ld + n0;
  const float* xk = pr.xf + k;
  for (int64_t c = 0; c < width; c += kLanes) {
    vecf wv[KU];  // converted once for every row of x
    for (int u = 0; u < KU; ++u) wv[u] = E::load_vec(wk[u] + c);
    for (int64_t m = 0; m < pr.M; ++m) {
      float* s = sums + m * width + c;
      vecf acc = load_f32x(s);
      for (int u = 0; u < KU; ++u) acc += xk[m * pr.K + u] * wv[u];
      __builtin_memcpy(s, &acc, sizeof acc);
    }
  }
}

// Columns n0 .. n0+width (a multiple of kLanes, width * M <= kNnSums).
template <DType D>
void nn_strip(const Problem& pr, int64_t n0, int64_t width) {
  float sums[kNnSums];
  for (int64_t i = 0; i < pr.M * width; ++i) sums[i] = 0.0f;
  // No software prefetch: the runs are long enough for the hardware
  // prefetchers, and hints for the next rows measured slower.
  int64_t k = 0;
  for (; k + kNnRowsPerStep <= pr.K; k += kNnRowsPerStep) {
    nn_strip_step<D, kNnRowsPerStep>(pr, n0, width, k, sums);
  }
  for (; k < pr.K; ++k) nn_strip_step<D, 1>(pr, n0, width, k, sums);
  for (int64_t m = 0; m < pr.M; ++m) {
    for (int64_t c = 0; c < width; ++c) store_out<D>(pr, m, n0 + c, sums[m * width + c]);
  }
}

// Runs tile<MR> for every group of rows, MR = MaxRows except the last.
template <int MaxRows, class Tile>
void for_row_groups(const Problem& pr, Tile&& tile) {
  static_assert(MaxRows >= 1 && MaxRows <= 4);
  for (int64_t m0 = 0; m0 < pr.M; m0 += MaxRows) {
    switch (std::min<int64_t>(MaxRows, pr.M - m0)) {
      case 1: tile.template operator()<1>(m0); break;
      case 2: if constexpr (MaxRows >= 2) tile.template operator()<2>(m0); break;
      case 3: if constexpr (MaxRows >= 3) tile.template operator()<3>(m0); break;
      case 4: if constexpr (MaxRows >= 4) tile.template operator()<4>(m0); break;
    }
  }
}

template <DType D, NtShape S>
void run_nt(const Problem& pr, const ParallelFor& parallel_for) {
  const int64_t units = (pr.N + S.cols - 1) / S.cols;
  parallel_for(units, [&](int64_t begin, int64_t end) {
    const int64_t nend = std::min(end * S.cols, pr.N);
    for (int64_t n0 = begin * S.cols; n0 < nend; n0 += S.cols) {
#if NK_ISA_LEVEL == 3
      if constexpr (D == DType::kBFloat16) {
        for_row_groups<S.max_rows>(pr, [&]<int MR>(int64_t m0) { nt_tile_bf16_dot<MR>(pr, m0, n0, nend); });
        continue;
      }
#endif
      for_row_groups<S.max_rows>(pr, [&]<int MR>(int64_t m0) { nt_tile<D, MR, S.cols>(pr, m0, n0, nend); });
    }
  });
}

template <DType D>
void run_nn(const Problem& pr, const ParallelFor& parallel_for) {
  const int64_t units = (pr.N + kWideCols - 1) / kWideCols;
  parallel_for(units, [&](int64_t begin, int64_t end) {
    const int64_t nend = std::min(end * kWideCols, pr.N);
    int64_t n0 = begin * kWideCols;
#if NK_VEC_LANES != 16
    const int64_t vec_end = n0 + (nend - n0) / kLanes * kLanes;
    const int64_t strip = kNnSums / pr.M / kLanes * kLanes;  // wider for fewer rows
    if (strip > 0) {  // (with more rows than the kernel is meant for, nn_narrow does all)
      for (; n0 < vec_end; n0 += strip) nn_strip<D>(pr, n0, std::min(strip, vec_end - n0));
      n0 = vec_end;
    }
#else
    for (; n0 + kWideCols <= nend; n0 += kWideCols) {
      for_row_groups<kWideMaxRows>(pr, [&]<int MR>(int64_t m0) { nn_tile<D, MR>(pr, m0, n0); });
    }
#endif
    nn_narrow<D>(pr, n0, nend);
  });
}

#if NK_ISA_LEVEL == 3
// "nt" for bfloat16 with AVX512_BF16 by streaming columns, for a few rows
// (kBf16DotStreamRows): each column is read once from memory, and every
// row's vdpbf16ps takes it from the register it was loaded into, so no row
// converts it (nt_stream converts it once per row). One sequential stream
// per thread, as nt_stream. Measured on an AMD Zen 5 (benchmarks/linear.py,
// 768 x 2048): 2 to 6 rows read at 38-43 GB/s where the tiles read 33-43 and
// one row 29-33 in the same runs; from 8 rows on, rows take passes of four
// over each column and the vdpbf16ps themselves bound the time (8 rows 85
// against the tiles' 78 us, 12 rows 228 against 91), and two interleaved
// columns a pass fell to 23 GB/s at 2 to 4 rows.
constexpr int64_t kBf16DotStreamRows = 6;

template <int MR>
inline void column_dots_bf16(const uint16_t* const* xr, const uint16_t* wc, int64_t kv, float* sums) {
  // Two sums per row (even and odd stretches of 32): a row's vdpbf16ps
  // otherwise waits for its previous one.
  __m512 acc[4], odd[4];
  for (int i = 0; i < 4; ++i) acc[i] = odd[i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= kv; k += 64) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wc + k), w1 = (__m512bh)_mm512_loadu_si512(wc + k + 32);
    for (int i = 0; i < MR; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_loadu_si512(xr[i] + k), w0);
      odd[i] = _mm512_dpbf16_ps(odd[i], (__m512bh)_mm512_loadu_si512(xr[i] + k + 32), w1);
    }
  }
  if (k < kv) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wc + k);
    for (int i = 0; i < MR; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_loadu_si512(xr[i] + k), w0);
  }
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_add_ps(acc[i], odd[i]);
  vecf parts[4];
  __builtin_memcpy(parts, acc, sizeof parts);
  lane_sums4(parts, sums);
}

void nt_stream_bf16_dot(const Problem& pr, int64_t n0, int64_t n1) {
  using E = Elem<DType::kBFloat16>;
  const int64_t K = pr.K, kv = K / 32 * 32, ld = pr.p.w.col_stride;
  const auto* w = as<DType::kBFloat16>(pr.p.w.data);
  const auto* x = as<DType::kBFloat16>(pr.p.x.data);
  const uint16_t* xr[kBf16DotStreamRows];
  for (int64_t m = 0; m < pr.M; ++m) xr[m] = x + m * pr.p.x.row_stride;
  const bool prefetch = prefetches_ahead(K * 2, ld * 2);
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wc = w + n * ld;
    if (prefetch) prefetch_ahead(wc, w + n1 * ld, K * 2);
    float sums[kBf16DotStreamRows + 4];
    for (int64_t m0 = 0; m0 < pr.M; m0 += 4) {  // a second pass reads the column from L1
      switch (std::min<int64_t>(4, pr.M - m0)) {
        case 1: column_dots_bf16<1>(xr + m0, wc, kv, sums + m0); break;
        case 2: column_dots_bf16<2>(xr + m0, wc, kv, sums + m0); break;
        case 3: column_dots_bf16<3>(xr + m0, wc, kv, sums + m0); break;
        default: column_dots_bf16<4>(xr + m0, wc, kv, sums + m0); break;
      }
    }
    for (int64_t m = 0; m < pr.M; ++m) {
      float s = sums[m];
      for (int64_t k = kv; k < K; ++k) s += pr.xf[m * K + k] * E::load(wc + k);
      store_out<DType::kBFloat16>(pr, m, n, s);
    }
  }
}
#endif

template <DType D>
void run(const Problem& pr, const ParallelFor& parallel_for) {
  if (pr.p.w.row_stride != 1) return run_nn<D>(pr, parallel_for);
#if NK_ISA_LEVEL == 3
  if constexpr (D == DType::kBFloat16) {
    if (pr.M >= 2 && pr.M <= kBf16DotStreamRows && pr.p.x.col_stride == 1) {
      return parallel_for(pr.N, [&](int64_t begin, int64_t end) { nt_stream_bf16_dot(pr, begin, end); });
    }
  }
#endif
  if (pr.M <= stream_rows<D>()) {
    return parallel_for(pr.N, [&](int64_t begin, int64_t end) { nt_stream<D>(pr, begin, end); });
  }
  run_nt<D, kNtShape>(pr, parallel_for);
}

// x as float32, [M, K] contiguous.
template <DType D>
void convert_x(const View2& x, float* xf) {
  using E = Elem<D>;
  for (int64_t m = 0; m < x.rows; ++m) {
    const auto* row = as<D>(x.data) + m * x.row_stride;
    float* dst = xf + m * x.cols;
    int64_t k = 0;
    for (; k + kLanes <= x.cols; k += kLanes) {
      const vecf v = E::load_vec(row + k);
      __builtin_memcpy(dst + k, &v, sizeof v);
    }
    for (; k < x.cols; ++k) dst[k] = E::load(row + k);
  }
}

template <DType D>
void run_dtype(const SkinnyMatmulParams& p, const ParallelFor& parallel_for) {
  const int64_t M = p.x.rows, K = p.x.cols, N = p.w.cols;
  std::vector<float> xf(static_cast<size_t>(M * K));
  convert_x<D>(p.x, xf.data());
  run<D>(Problem{p, xf.data(), M, K, N}, parallel_for);
}

}  // namespace

void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& parallel_for) {
  if (p.x.rows == 0 || p.w.cols == 0) return;
  switch (p.x.dtype) {
    case DType::kFloat32: return run_dtype<DType::kFloat32>(p, parallel_for);
    case DType::kBFloat16: return run_dtype<DType::kBFloat16>(p, parallel_for);
    case DType::kFloat16: return run_dtype<DType::kFloat16>(p, parallel_for);
  }
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
