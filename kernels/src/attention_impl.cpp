// Flash-style attention on one instruction set (see attention_impl.hpp).
//
// Forward: work items are (batch, KV head, block of queries); an item holds
// the rows of every query head that shares the KV head (grouped-query
// attention reads each key block once per group). For each block of kBk
// keys, rows the causal rule or the mask hide entirely skip it, and a block
// no row sees is never read; the others get scores, an online-softmax
// update and their share of P.V, all in float32.
//
// Backward: work items are (batch, KV head); an item owns dK and dV of its
// KV head and dQ of its query heads, so items never write the same memory.
//
// Every product (Q.K^T, P.V and the five of the backward) runs through one
// register-tiled kernel (attention_vec.hpp) on consecutive rows that see
// the block, so the arithmetic is vector FMAs of the level's native width;
// a decode step's few rows (kDirectRows) instead take dot products with each
// key and sum value rows, reading 16-bit keys and values in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "attention_impl.hpp"
#include "numeric.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

#include "attention_vec.hpp"
#include "element_vectors.hpp"
#include "lane_folds.hpp"

// load_f32 and store_f32 (numeric.hpp), in this level's vectors when the
// elements are contiguous (numeric.hpp's loops are baseline code).
inline void load_as_f32(const void* src, DType t, int64_t stride, int64_t n, float* dst) {
  if (stride == 1) return load_row(src, t, n, dst);
  load_f32(src, t, stride, n, dst);
}
template <DType D>
inline void store_scaled(typename Elem<D>::Storage* dst, int64_t n, const float* src, float mul) {
  const vec m = vsplat(mul);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) Elem<D>::store_vec(dst + i, vload(src + i) * m);
  for (; i < n; ++i) Elem<D>::store(dst + i, src[i] * mul);
}
inline void store_from_f32(void* dst, DType t, int64_t stride, int64_t n, const float* src, float mul) {
  if (stride != 1) return store_f32(dst, t, stride, n, src, mul);
  switch (t) {
    case DType::kFloat32: return store_scaled<DType::kFloat32>(static_cast<float*>(dst), n, src, mul);
    case DType::kBFloat16: return store_scaled<DType::kBFloat16>(static_cast<uint16_t*>(dst), n, src, mul);
    case DType::kFloat16: return store_scaled<DType::kFloat16>(static_cast<uint16_t*>(dst), n, src, mul);
  }
}

constexpr int64_t kBk = 64;  // keys per block: a multiple of every tile's columns
static_assert(kBk % (kTileVecs * kLanes) == 0);

struct Dims {
  int64_t B, Hq, Hkv, G, L, S, D, Dv;
  int64_t Dp, Dvp;  // D and Dv rounded up to whole vectors (row strides of scratch)
};

Dims dims_of(const AttentionParams& p) {
  Dims d;
  d.B = p.q.sizes[0];
  d.Hq = p.q.sizes[1];
  d.L = p.q.sizes[2];
  d.D = p.q.sizes[3];
  d.Hkv = p.k.sizes[1];
  d.S = p.k.sizes[2];
  d.Dv = p.v.sizes[3];
  d.G = d.Hkv > 0 ? d.Hq / d.Hkv : 1;
  d.Dp = round_up_to_lanes(d.D);
  d.Dvp = round_up_to_lanes(d.Dv);
  return d;
}

// How one row sees a block of keys.
enum class Seen : uint8_t {
  kNone,  // every key hidden: the row skips the block
  kAll,   // a full block, no mask, no causal cut: no bias to add
  kSome,  // the bias (mask, causal rule, -inf past the end) was written out
};

// What a mask holds over one row's block of keys, found once per call: a
// compiled graph's causal or padding mask (a traced model cannot take the
// is_causal shortcut) then costs a lookup per row and block, not a read, and
// its hidden blocks are skipped as the causal rule's are.
enum class MaskBlock : uint8_t {
  kNoMask,  // no mask
  kZeros,   // every bias 0
  kHidden,  // every bias -inf
  kMixed,   // anything else: the bias is read
};

class MaskBlocks {
 public:
  // Classifies every (batch, head, row, key block) of the mask the mask's own
  // extents hold (a mask broadcast over batches, heads or rows is classified
  // once).
  MaskBlocks(const AttentionParams& p, const Dims& d, const ParallelFor& parallel_for) {
    if (!p.mask.data) return;
    batches_ = p.mask.strides[0] == 0 ? 1 : d.B;
    heads_ = p.mask.strides[1] == 0 ? 1 : d.Hq;
    rows_ = p.mask.strides[2] == 0 ? 1 : d.L;
    blocks_ = (d.S + kBk - 1) / kBk;
    cls_.resize(static_cast<size_t>(batches_ * heads_ * rows_ * blocks_));
    // A decode step's mask (one row) is read on the calling thread: handing
    // out a few hundred values would cost more than reading them.
    constexpr int64_t kParallelValues = int64_t{1} << 16;
    const ParallelFor& pf = batches_ * heads_ * rows_ * d.S < kParallelValues ? ParallelFor(serial_for) : parallel_for;
    pf(batches_ * heads_ * rows_, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(d.S));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t i = r % rows_, h = (r / rows_) % heads_, b = r / (rows_ * heads_);
        load_as_f32(at_element(p.mask, b, h, i, 0), p.mask.dtype, p.mask.strides[3], d.S, row.data());
        for (int64_t k = 0; k < blocks_; ++k) {
          const int64_t k0 = k * kBk, nk = std::min(kBk, d.S - k0);
          bool zeros = true, hidden = true;
          for (int64_t j = 0; j < nk; ++j) {
            zeros &= row[k0 + j] == 0.0f;
            hidden &= row[k0 + j] == kNegInf;
          }
          cls_[r * blocks_ + k] = hidden ? MaskBlock::kHidden : (zeros ? MaskBlock::kZeros : MaskBlock::kMixed);
        }
      }
    });
  }

  MaskBlock of(int64_t b, int64_t h, int64_t i, int64_t k0) const {
    if (cls_.empty()) return MaskBlock::kNoMask;
    const int64_t mb = batches_ == 1 ? 0 : b, mh = heads_ == 1 ? 0 : h, mi = rows_ == 1 ? 0 : i;
    return cls_[((mb * heads_ + mh) * rows_ + mi) * blocks_ + k0 / kBk];
  }

 private:
  int64_t batches_ = 0, heads_ = 0, rows_ = 0, blocks_ = 0;
  std::vector<MaskBlock> cls_;
};

// Row i's view of keys [k0, k0+nk); for kSome, its additive bias into dst[0..kBk).
Seen bias_segment(const AttentionParams& p, const MaskBlocks& mask, int64_t b, int64_t h, int64_t i,
                  int64_t k0, int64_t nk, float* dst) {
  if (p.causal && k0 > i) return Seen::kNone;
  const MaskBlock cls = mask.of(b, h, i, k0);
  if (cls == MaskBlock::kHidden) return Seen::kNone;
  if (cls != MaskBlock::kMixed && nk == kBk && (!p.causal || k0 + kBk - 1 <= i)) return Seen::kAll;
  if (p.mask.data) {
    load_as_f32(at_element(p.mask, b, h, i, k0), p.mask.dtype, p.mask.strides[3], nk, dst);
  } else {
    std::fill(dst, dst + nk, 0.0f);
  }
  std::fill(dst + nk, dst + kBk, kNegInf);
  if (p.causal) {
    for (int64_t j = std::max<int64_t>(0, i + 1 - k0); j < nk; ++j) dst[j] = kNegInf;
  }
  bool any = false;
  for (int64_t j = 0; j < nk; ++j) any |= dst[j] != kNegInf;
  return any ? Seen::kSome : Seen::kNone;
}

// Calls f(begin, end) for each maximal run of rows that see the block.
template <class F>
void for_each_run(const Seen* seen, int64_t rows, F&& f) {
  for (int64_t r = 0; r < rows;) {
    if (seen[r] == Seen::kNone) {
      ++r;
      continue;
    }
    int64_t end = r + 1;
    while (end < rows && seen[end] != Seen::kNone) ++end;
    f(r, end);
    r = end;
  }
}

// Row `j` of x (feature dim contiguous or not, any dtype) as float32: the
// memory itself when it already is contiguous float32, else a converted copy.
inline const float* row_f32(const View4& x, int64_t b, int64_t h, int64_t j, int64_t width,
                            float* scratch) {
  const char* src = at_element(x, b, h, j, 0);
  if (x.dtype == DType::kFloat32 && x.strides[3] == 1) return reinterpret_cast<const float*>(src);
  load_as_f32(src, x.dtype, x.strides[3], width, scratch);
  return scratch;
}

// kt[d][j] = row (k0 + j) of x, feature d, as float32; zero beyond nk.
void load_transposed(const View4& x, int64_t b, int64_t h, int64_t k0, int64_t nk,
                     int64_t width, float* kt, std::vector<float>& row_scratch) {
  row_scratch.resize(width);
  for (int64_t j = 0; j < kBk; ++j) {
    if (j < nk) {
      const float* row = row_f32(x, b, h, k0 + j, width, row_scratch.data());
      for (int64_t e = 0; e < width; ++e) kt[e * kBk + j] = row[e];
    } else {
      for (int64_t e = 0; e < width; ++e) kt[e * kBk + j] = 0.0f;
    }
  }
}

// rows[j][0..stride) = row (k0 + j) of x as float32, zero-padded past width.
void load_rows(const View4& x, int64_t b, int64_t h, int64_t k0, int64_t nk, int64_t width,
               int64_t stride, float* rows) {
  for (int64_t j = 0; j < nk; ++j) {
    float* dst = rows + j * stride;
    load_as_f32(at_element(x, b, h, k0 + j, 0), x.dtype, x.strides[3], width, dst);
    std::fill(dst + width, dst + stride, 0.0f);
  }
}

// Rows [k0, k0+nk) of x as the B operand of a product: in place when they
// already are float32 with whole vectors per row, else copied into `rows`.
MatB rows_operand(const View4& x, int64_t b, int64_t h, int64_t k0, int64_t nk, int64_t width,
                  int64_t stride, float* rows) {
  if (x.dtype == DType::kFloat32 && x.strides[3] == 1 && width % kLanes == 0) {
    return {reinterpret_cast<const float*>(at_element(x, b, h, k0, 0)), x.strides[2]};
  }
  load_rows(x, b, h, k0, nk, width, stride, rows);
  return {rows, stride};
}

#include "attention_direct.hpp"

// Asks for rows [k0, k0+nk) of x ahead of their use: decode reads each key
// and value once, from memory, and has too little arithmetic to hide that.
void prefetch_rows(const View4& x, int64_t b, int64_t h, int64_t k0, int64_t nk, int64_t width) {
  if (x.strides[3] != 1) return;
  const int64_t bytes = width * int64_t(dtype_size(x.dtype));
  for (int64_t j = 0; j < nk; ++j) {
    const char* row = at_element(x, b, h, k0 + j, 0);
    for (int64_t at = 0; at < bytes; at += 64) __builtin_prefetch(row + at);
  }
}

inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  vec acc{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) acc += vload(a + i) * vload(b + i);
  float s = hsum(acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The score the softmax sees, x * scale + bias (bias null: none). The
// backward recomputes P = exp(s - lse) from it, so both passes must get s
// bitwise alike (a one-ulp difference becomes a relative error of ulp(s) in
// P, 8e-6 at s = 80): the rounding is spelled out rather than left to the
// compiler's contraction, which may differ between call sites. With a bias,
// levels with FMA round once (a mask of 8 next to a product of 50 otherwise
// costs the product's half-ulp again); baseline has no FMA and rounds twice,
// the empty asm keeping the product rounded.
inline vec scaled_score(vec x, const float* bias, float scale) {
  if (!bias) return x * scale;
#if defined(__x86_64__) && NK_VEC_LANES == 16
  return (vec)_mm512_fmadd_ps((__m512)x, (__m512)vsplat(scale), (__m512)vload(bias));
#elif defined(__x86_64__) && NK_VEC_LANES == 8
  return (vec)_mm256_fmadd_ps((__m256)x, (__m256)vsplat(scale), (__m256)vload(bias));
#else
  vec v = x * scale;
  asm("" : "+x"(v));
  return v + vload(bias);
#endif
}

// x[j] = scaled_score(x[j]) over a key block; returns the block's max.
inline float scale_bias_max(float* __restrict x, const float* __restrict bias, float scale) {
  vec m = vsplat(kNegInf);
  for (int64_t j = 0; j < kBk; j += kLanes) {
    const vec v = scaled_score(vload(x + j), bias ? bias + j : nullptr, scale);
    vstore(x + j, v);
    m = vmax(m, v);
  }
  return hmax(m);
}

// p[j] = exp(x[j] - shift) over a key block; returns the sum.
inline float exp_sum(const float* __restrict x, float shift, float* __restrict p) {
  vec sum{};
  for (int64_t j = 0; j < kBk; j += kLanes) {
    const vec e = exp_vec</*kAtMostZero=*/true>(vload(x + j) - shift);  // shift is the max
    vstore(p + j, e);
    sum += e;
  }
  return hsum(sum);
}

inline void scale_row(float* x, int64_t n, float a) {
  for (int64_t e = 0; e < n; e += kLanes) vstore(x + e, vload(x + e) * a);
}

// Rows per step of the forward: a step's scores, probabilities and bias for
// one key block (3 x 12 KB) stay in L1/L2 between the products and the
// softmax. A multiple of every level's tile rows.
constexpr int64_t kForwardRows = 48;
static_assert(kForwardRows % kTileRows == 0);

struct ForwardScratch {
  std::vector<float> q, acc, m, l, kt, kb, vb, bias, row, scores, probs;
  std::vector<Seen> seen;
  // Key and value copies only where they are made (a decode step's 16-bit
  // keys and values are read in place, so its items allocate and clear less).
  void size(int64_t rows, const Dims& d, bool keys_copied, bool values_copied) {
    q.resize(rows * d.Dp);
    acc.resize(rows * d.Dvp);
    m.resize(rows);
    l.resize(rows);
    const bool direct = scores_directly(d);
    kt.resize(direct ? 0 : d.D * kBk);
    kb.resize(direct && keys_copied ? kBk * d.Dp : 0);
    vb.resize(values_copied ? kBk * d.Dvp : 0);
    row.resize(std::max(d.D, d.Dv));
    bias.resize(kForwardRows * kBk);
    scores.resize(kForwardRows * kBk);
    probs.resize(kForwardRows * kBk);
    seen.resize(kForwardRows);
  }
};


// Online softmax of one row over a block: new running max, rescaled
// accumulator, probabilities into pr (all zero if the mask leaves nothing).
inline void softmax_step(float* sc, const float* bias, float scale, float* pr, float& m,
                         float& l, float* acc, int64_t Dvp) {
  const float m_new = std::max(m, scale_bias_max(sc, bias, scale));
  if (m_new == kNegInf) {  // P.V then adds zeros
    std::fill(pr, pr + kBk, 0.0f);
    return;
  }
  const float corr = m_new == m ? 1.0f : exp_f32(m - m_new);  // exp(0) is 1
  const float sum = exp_sum(sc, m_new, pr);
  if (corr != 1.0f) scale_row(acc, Dvp, corr);
  l = l * corr + sum;
  m = m_new;
}

void forward_item(const AttentionParams& p, const Dims& d, const MaskBlocks& mask, const View4& out, float* lse,
                  int64_t b, int64_t hk, int64_t q0, int64_t nq, ForwardScratch& s) {
  const int64_t rows = d.G * nq;
  const bool direct = scores_directly(d);
  const bool keys_in_place = direct && readable_in_place(p.k, d.D);
  const bool values_in_place = direct && readable_in_place(p.v, d.Dv);
  s.size(rows, d, !keys_in_place, !values_in_place);
  auto head = [&](int64_t r) { return hk * d.G + r / nq; };
  auto query = [&](int64_t r) { return q0 + r % nq; };
  for (int64_t r = 0; r < rows; ++r) {
    float* q = &s.q[r * d.Dp];
    load_as_f32(at_element(p.q, b, head(r), query(r), 0), p.q.dtype, p.q.strides[3], d.D, q);
    std::fill(q + d.D, q + d.Dp, 0.0f);
  }
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  std::fill(s.m.begin(), s.m.end(), kNegInf);
  std::fill(s.l.begin(), s.l.end(), 0.0f);
  const int64_t last_query = q0 + nq - 1;

  for (int64_t k0 = 0; k0 < d.S; k0 += kBk) {
    if (p.causal && k0 > last_query) break;  // every later block is hidden too
    const int64_t nk = std::min(kBk, d.S - k0);
    bool loaded = false;  // keys and values are read once a row sees the block
    MatB keys{}, values{};
    for (int64_t c0 = 0; c0 < rows; c0 += kForwardRows) {
      const int64_t chunk = std::min(kForwardRows, rows - c0);
      bool any = false;
      for (int64_t u = 0; u < chunk; ++u) {
        s.seen[u] = bias_segment(p, mask, b, head(c0 + u), query(c0 + u), k0, nk, &s.bias[u * kBk]);
        any |= s.seen[u] != Seen::kNone;
      }
      if (!any) continue;  // e.g. the unfilled part of a static KV cache
      if (!loaded) {
        if (direct) {
          if (k0 + kBk < d.S) {
            const int64_t next = std::min(kBk, d.S - k0 - kBk);
            prefetch_rows(p.k, b, hk, k0 + kBk, next, d.D);
            prefetch_rows(p.v, b, hk, k0 + kBk, next, d.Dv);
          }
          if (!keys_in_place) keys = rows_operand(p.k, b, hk, k0, nk, d.D, d.Dp, s.kb.data());
        } else {
          load_transposed(p.k, b, hk, k0, nk, d.D, s.kt.data(), s.row);
          keys = {s.kt.data(), kBk};
        }
        if (!values_in_place) values = rows_operand(p.v, b, hk, k0, nk, d.Dv, d.Dvp, s.vb.data());
        loaded = true;
      }
      const float* q = &s.q[c0 * d.Dp];
      float* acc = &s.acc[c0 * d.Dvp];

      // 1. Scores of the rows that see the block.
      if (keys_in_place) {
        with_rows_in_place(p.k, b, hk, k0, [&]<DType D>(const uint16_t* rows_in_place) {
          direct_scores<D>(q, d.Dp, s.seen.data(), chunk, rows_in_place, p.k.strides[2], nk, d.Dp,
                           s.scores.data());
        });
      } else if (direct) {
        direct_scores(q, d.Dp, s.seen.data(), chunk, keys, nk, d.Dp, s.scores.data());
      } else {
        for_each_run(s.seen.data(), chunk, [&](int64_t u0, int64_t u1) {
          product<false>(u1 - u0, kBk, d.D, {q + u0 * d.Dp, d.Dp, 1}, keys,
                         {&s.scores[u0 * kBk], kBk});
        });
      }
      // 2. Online softmax.
      for (int64_t u = 0; u < chunk; ++u) {
        if (s.seen[u] == Seen::kNone) continue;
        softmax_step(&s.scores[u * kBk], s.seen[u] == Seen::kSome ? &s.bias[u * kBk] : nullptr,
                     p.scale, &s.probs[u * kBk], s.m[c0 + u], s.l[c0 + u], acc + u * d.Dvp,
                     d.Dvp);
      }
      // 3. acc += P.V.
      if (values_in_place) {
        with_rows_in_place(p.v, b, hk, k0, [&]<DType D>(const uint16_t* rows_in_place) {
          direct_values<D>(s.probs.data(), s.seen.data(), chunk, rows_in_place, p.v.strides[2], nk, d.Dv, acc,
                           d.Dvp);
        });
        continue;
      }
      for_each_run(s.seen.data(), chunk, [&](int64_t u0, int64_t u1) {
        product<true>(u1 - u0, d.Dvp, nk, {&s.probs[u0 * kBk], kBk, 1}, values,
                      {acc + u0 * d.Dvp, d.Dvp});
      });
    }
  }

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = head(r), i = query(r);
    const float l = s.l[r];
    // acc / l, one rounding (acc * (1 / l) would take two; the backward's
    // delta = dO.out inherits out's error); a row that sees no key outputs zeros.
    float* acc = &s.acc[r * d.Dvp];
    for (int64_t e = 0; e < d.Dv; ++e) acc[e] = l > 0.0f ? acc[e] / l : 0.0f;
    void* dst = const_cast<char*>(at_element(out, b, h, i, 0));
    store_from_f32(dst, out.dtype, out.strides[3], d.Dv, acc, 1.0f);
    if (lse) lse[(b * d.Hq + h) * d.L + i] = l > 0.0f ? s.m[r] + std::log(l) : kNegInf;
  }
}

// Rows per step of the backward: their scores, probabilities and score
// gradients for one key block stay in L1/L2 (3 x 16 KB).
constexpr int64_t kBackwardRows = 64;

struct BackwardScratch {
  std::vector<float> q, dout, delta, lse, dq, kt, kb, vt, dk, dv, bias, row, probs, dscores;
  std::vector<Seen> seen;
};

void backward_item(const AttentionParams& p, const Dims& d, const MaskBlocks& mask, const View4& out, const float* lse,
                   const View4& grad_out, const AttentionGrads& g, int64_t b, int64_t hk,
                   BackwardScratch& s) {
  const int64_t rows = d.G * d.L;
  const bool direct = scores_directly(d);
  auto head = [&](int64_t r) { return hk * d.G + r / d.L; };
  auto query = [&](int64_t r) { return r % d.L; };
  s.q.resize(rows * d.Dp);
  s.dout.resize(rows * d.Dvp);
  s.delta.resize(rows);
  s.lse.resize(rows);
  s.dq.assign(rows * d.Dp, 0.0f);
  s.kt.resize(d.D * kBk);
  s.kb.resize(kBk * d.Dp);
  s.vt.resize(d.Dv * kBk);
  s.dk.resize(kBk * d.Dp);
  s.dv.resize(kBk * d.Dvp);
  s.bias.resize(kBackwardRows * kBk);
  s.probs.resize(kBackwardRows * kBk);
  s.dscores.resize(kBackwardRows * kBk);
  s.seen.resize(kBackwardRows);
  std::vector<float> o(d.Dv);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = head(r), i = query(r);
    float* q = &s.q[r * d.Dp];
    load_as_f32(at_element(p.q, b, h, i, 0), p.q.dtype, p.q.strides[3], d.D, q);
    std::fill(q + d.D, q + d.Dp, 0.0f);
    float* dout = &s.dout[r * d.Dvp];
    load_as_f32(at_element(grad_out, b, h, i, 0), grad_out.dtype, grad_out.strides[3], d.Dv, dout);
    std::fill(dout + d.Dv, dout + d.Dvp, 0.0f);
    load_as_f32(at_element(out, b, h, i, 0), out.dtype, out.strides[3], d.Dv, o.data());
    s.delta[r] = dot(dout, o.data(), d.Dv);
    s.lse[r] = lse[(b * d.Hq + h) * d.L + i];
  }

  for (int64_t k0 = 0; k0 < d.S; k0 += kBk) {
    const int64_t nk = std::min(kBk, d.S - k0);
    std::fill(s.dk.begin(), s.dk.end(), 0.0f);
    std::fill(s.dv.begin(), s.dv.end(), 0.0f);
    bool loaded = false;
    for (int64_t c0 = 0; c0 < rows; c0 += kBackwardRows) {
      const int64_t chunk = std::min(kBackwardRows, rows - c0);
      bool any = false;
      for (int64_t u = 0; u < chunk; ++u) {
        const int64_t r = c0 + u;
        s.seen[u] = s.lse[r] == kNegInf  // the row saw no key: no gradient
                        ? Seen::kNone
                        : bias_segment(p, mask, b, head(r), query(r), k0, nk, &s.bias[u * kBk]);
        any |= s.seen[u] != Seen::kNone;
      }
      if (!any) continue;
      if (!loaded) {
        if (!direct) load_transposed(p.k, b, hk, k0, nk, d.D, s.kt.data(), s.row);
        load_rows(p.k, b, hk, k0, nk, d.D, d.Dp, s.kb.data());
        load_transposed(p.v, b, hk, k0, nk, d.Dv, s.vt.data(), s.row);
        loaded = true;
      }
      for_each_run(s.seen.data(), chunk, [&](int64_t u0, int64_t u1) {
        const int64_t r0 = c0 + u0, n = u1 - u0;
        float* pr = &s.probs[u0 * kBk];
        float* ds = &s.dscores[u0 * kBk];
        const float* q = &s.q[r0 * d.Dp];
        const float* dout = &s.dout[r0 * d.Dvp];
        // Scores into pr (by the forward's routine, so bitwise the forward's),
        // dP = dO.V^T into ds; then P and dS = P * (dP - delta) in place.
        if (direct) {
          direct_scores(q, d.Dp, &s.seen[u0], n, {s.kb.data(), d.Dp}, nk, d.Dp, pr);
        } else {
          product<false>(n, kBk, d.D, {q, d.Dp, 1}, {s.kt.data(), kBk}, {pr, kBk});
        }
        product<false>(n, kBk, d.Dv, {dout, d.Dvp, 1}, {s.vt.data(), kBk}, {ds, kBk});
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t r = c0 + u;
          float* prow = &s.probs[u * kBk];
          float* dsrow = &s.dscores[u * kBk];
          const float* bias = s.seen[u] == Seen::kSome ? &s.bias[u * kBk] : nullptr;
          for (int64_t j = 0; j < kBk; j += kLanes) {
            const vec x = scaled_score(vload(prow + j), bias ? bias + j : nullptr, p.scale);
            const vec pj = exp_vec(x - s.lse[r]);
            vstore(prow + j, pj);
            vstore(dsrow + j, pj * (vload(dsrow + j) - s.delta[r]));
          }
          if (g.dscores) {
            float* dst = g.dscores + ((b * d.Hq + head(r)) * d.L + query(r)) * d.S + k0;
            std::memcpy(dst, dsrow, nk * sizeof(float));
          }
        }
        // dV += P^T.dO, dK += dS^T.Q (unscaled), dQ += dS.K (unscaled).
        product<true>(nk, d.Dvp, n, {pr, 1, kBk}, {dout, d.Dvp}, {s.dv.data(), d.Dvp});
        product<true>(nk, d.Dp, n, {ds, 1, kBk}, {q, d.Dp}, {s.dk.data(), d.Dp});
        product<true>(n, d.Dp, nk, {ds, kBk, 1}, {s.kb.data(), d.Dp}, {&s.dq[r0 * d.Dp], d.Dp});
      });
    }
    // Every key row gets written, zeros included (no row saw it).
    for (int64_t j = 0; j < nk; ++j) {
      if (g.dk.data) {
        store_from_f32(const_cast<char*>(at_element(g.dk, b, hk, k0 + j, 0)), g.dk.dtype,
                       g.dk.strides[3], d.D, &s.dk[j * d.Dp], p.scale);
      }
      if (g.dv.data) {
        store_from_f32(const_cast<char*>(at_element(g.dv, b, hk, k0 + j, 0)), g.dv.dtype,
                       g.dv.strides[3], d.Dv, &s.dv[j * d.Dvp], 1.0f);
      }
    }
  }
  if (g.dq.data) {
    for (int64_t r = 0; r < rows; ++r) {
      store_from_f32(const_cast<char*>(at_element(g.dq, b, head(r), query(r), 0)), g.dq.dtype,
                     g.dq.strides[3], d.D, &s.dq[r * d.Dp], p.scale);
    }
  }
}

}  // namespace

void forward(const AttentionParams& p, const View4& out, float* lse,
             const ParallelFor& parallel_for) {
  const Dims d = dims_of(p);
  if (d.B == 0 || d.Hq == 0 || d.L == 0 || d.Dv == 0) return;
  // About 256 rows per item: each key/value block is converted to float32
  // (and transposed) once per item, which costs about as much as 64 rows'
  // worth of arithmetic; items stay many enough to keep threads busy.
  const int64_t nq = std::clamp<int64_t>(256 / d.G, 1, d.L);
  const int64_t qblocks = (d.L + nq - 1) / nq;
  const MaskBlocks mask(p, d, parallel_for);
  parallel_for(d.B * d.Hkv * qblocks, [&](int64_t begin, int64_t end) {
    ForwardScratch s;
    for (int64_t item = begin; item < end; ++item) {
      // Latest query blocks first: under the causal rule they see the most
      // keys, and a pool that hands out chunks dynamically then ends on
      // light ones.
      const int64_t qb = qblocks - 1 - item % qblocks;
      const int64_t hk = (item / qblocks) % d.Hkv;
      const int64_t b = item / (qblocks * d.Hkv);
      const int64_t q0 = qb * nq;
      forward_item(p, d, mask, out, lse, b, hk, q0, std::min(nq, d.L - q0), s);
    }
  });
}

void backward(const AttentionParams& p, const View4& out, const float* lse,
              const View4& grad_out, const AttentionGrads& g, const ParallelFor& parallel_for) {
  const Dims d = dims_of(p);
  if (d.B == 0 || d.Hkv == 0) return;
  const MaskBlocks mask(p, d, parallel_for);
  parallel_for(d.B * d.Hkv, [&](int64_t begin, int64_t end) {
    BackwardScratch s;
    for (int64_t item = begin; item < end; ++item) {
      backward_item(p, d, mask, out, lse, grad_out, g, item / d.Hkv, item % d.Hkv, s);
    }
  });
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
