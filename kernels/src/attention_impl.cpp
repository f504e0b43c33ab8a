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
#include <algorithm>
#include <cstring>
#include <vector>

#include "attention_impl.hpp"
#include "numeric.hpp"

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

constexpr int64_t kBk = 64;  // keys per block: a multiple of every vector width

struct Dims {
  int64_t B, Hq, Hkv, G, L, S, D, Dv;
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
  return d;
}

// Row i's additive bias for keys [k0, k0+nk) into dst[0..kBk): mask plus the
// causal rule, -inf beyond nk. Returns whether any of those keys is visible.
bool bias_segment(const AttentionParams& p, int64_t b, int64_t h, int64_t i, int64_t k0,
                  int64_t nk, float* dst) {
  if (p.mask.data) {
    load_f32(at_element(p.mask, b, h, i, k0), p.mask.dtype, p.mask.strides[3], nk, dst);
  } else {
    std::fill(dst, dst + nk, 0.0f);
  }
  std::fill(dst + nk, dst + kBk, kNegInf);
  if (p.causal) {
    for (int64_t j = std::max<int64_t>(0, i + 1 - k0); j < nk; ++j) dst[j] = kNegInf;
  }
  bool any = false;
  for (int64_t j = 0; j < nk; ++j) any |= dst[j] != kNegInf;
  return any;
}

// kt[d][j] = key (k0 + j), feature d, as float32; zero beyond nk.
void load_keys_transposed(const View4& k, int64_t b, int64_t hk, int64_t k0, int64_t nk,
                          int64_t D, float* kt, std::vector<float>& row_scratch) {
  row_scratch.resize(D);
  float* row = row_scratch.data();
  for (int64_t j = 0; j < kBk; ++j) {
    if (j < nk) {
      load_f32(at_element(k, b, hk, k0 + j, 0), k.dtype, k.strides[3], D, row);
    } else {
      std::fill(row, row + D, 0.0f);
    }
    for (int64_t d = 0; d < D; ++d) kt[d * kBk + j] = row[d];
  }
}

// rows[j][e] = row (k0 + j) of x, as float32; zero beyond nk.
void load_rows(const View4& x, int64_t b, int64_t h, int64_t k0, int64_t nk, int64_t width,
               float* rows) {
  for (int64_t j = 0; j < kBk; ++j) {
    float* dst = rows + j * width;
    if (j < nk) {
      load_f32(at_element(x, b, h, k0 + j, 0), x.dtype, x.strides[3], width, dst);
    } else {
      std::fill(dst, dst + width, 0.0f);
    }
  }
}

// y[e] += a * x[e]
inline void axpy(float a, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t e = 0; e < n; ++e) y[e] += a * x[e];
}

// Register tiles for many rows (prefill): kTileRows rows share every load of
// a key or value row, and their accumulators stay in vector registers
// (GCC vector extensions: one zmm per vector on AVX-512, split into
// narrower registers on the other instruction sets).
typedef float vec16 __attribute__((vector_size(64)));
constexpr int64_t kTileRows = 4;

inline vec16 load16(const float* p) {
  vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, vec16 v) { std::memcpy(p, &v, sizeof v); }

// scores[r][0..kBk) = q_r . kt[.][0..kBk) for NR rows at once.
template <int NR>
inline void dot_block_tile(const float* const* q, const float* __restrict kt, int64_t D,
                           float* const* scores) {
  vec16 acc[NR][kBk / 16] = {};
  for (int64_t d = 0; d < D; ++d) {
    vec16 k[kBk / 16];
    for (int c = 0; c < kBk / 16; ++c) k[c] = load16(kt + d * kBk + 16 * c);
    for (int r = 0; r < NR; ++r) {
      const float qd = q[r][d];
      for (int c = 0; c < kBk / 16; ++c) acc[r][c] += qd * k[c];
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < kBk / 16; ++c) store16(scores[r] + 16 * c, acc[r][c]);
  }
}

// One row: s[j] = sum_d q[d] * kt[d][j].
inline void dot_block(const float* q, const float* kt, int64_t D, float* s) {
  dot_block_tile<1>(&q, kt, D, &s);
}

// acc_r[0..Dv) += sum_j p_r[j] * vb[j][0..Dv) for NR rows, Dv % 64 == 0.
template <int NR>
inline void pv_tile(const float* const* p, const float* __restrict vb, int64_t nk, int64_t Dv,
                    float* const* acc) {
  for (int64_t e0 = 0; e0 < Dv; e0 += 64) {
    vec16 a[NR][4];
    for (int r = 0; r < NR; ++r) {
      for (int c = 0; c < 4; ++c) a[r][c] = load16(acc[r] + e0 + 16 * c);
    }
    for (int64_t j = 0; j < nk; ++j) {
      vec16 v[4];
      for (int c = 0; c < 4; ++c) v[c] = load16(vb + j * Dv + e0 + 16 * c);
      for (int r = 0; r < NR; ++r) {
        const float pj = p[r][j];
        for (int c = 0; c < 4; ++c) a[r][c] += pj * v[c];
      }
    }
    for (int r = 0; r < NR; ++r) {
      for (int c = 0; c < 4; ++c) store16(acc[r] + e0 + 16 * c, a[r][c]);
    }
  }
}

// Reductions over 16 independent lanes: the compiler may not reorder a float
// sum or max by itself, and a scalar loop here would serialize the exps too.
constexpr int64_t kLanes = 16;

inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t t = 0; t < kLanes; ++t) lanes[t] += a[i + t] * b[i + t];
  }
  float s = 0.0f;
  for (int64_t t = 0; t < kLanes; ++t) s += lanes[t];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// x[j] = x[j] * scale + bias[j] over a key block; returns the block's max.
inline float scale_bias_max(float* __restrict x, const float* __restrict bias, float scale) {
  float lanes[kLanes];
  for (int64_t t = 0; t < kLanes; ++t) lanes[t] = kNegInf;
  for (int64_t j = 0; j < kBk; j += kLanes) {
    for (int64_t t = 0; t < kLanes; ++t) {
      const float v = x[j + t] * scale + bias[j + t];
      x[j + t] = v;
      lanes[t] = v > lanes[t] ? v : lanes[t];
    }
  }
  float m = kNegInf;
  for (int64_t t = 0; t < kLanes; ++t) m = lanes[t] > m ? lanes[t] : m;
  return m;
}

// p[j] = exp(x[j] - shift) over a key block; returns the sum.
inline float exp_sum(const float* __restrict x, float shift, float* __restrict p) {
  float lanes[kLanes] = {};
  for (int64_t j = 0; j < kBk; j += kLanes) {
    for (int64_t t = 0; t < kLanes; ++t) {
      const float e = exp_f32(x[j + t] - shift);
      p[j + t] = e;
      lanes[t] += e;
    }
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < kLanes; ++t) sum += lanes[t];
  return sum;
}

// Row `j` of x (feature dim contiguous or not, any dtype) as float32: the
// memory itself when it already is contiguous float32, else a converted copy.
inline const float* row_f32(const View4& x, int64_t b, int64_t h, int64_t j, int64_t width,
                            float* scratch) {
  const char* src = at_element(x, b, h, j, 0);
  if (x.dtype == DType::kFloat32 && x.strides[3] == 1) return reinterpret_cast<const float*>(src);
  load_f32(src, x.dtype, x.strides[3], width, scratch);
  return scratch;
}

struct ForwardScratch {
  std::vector<float> q, acc, m, l, kt, vb, bias, row, scores, probs;
  void size(int64_t rows, const Dims& d) {
    q.resize(rows * d.D);
    acc.resize(rows * d.Dv);
    m.resize(rows);
    l.resize(rows);
    kt.resize(d.D * kBk);
    vb.resize(kBk * d.Dv);
    bias.resize(rows * kBk);
    row.resize(std::max(d.D, d.Dv));
    scores.resize(rows * kBk);
    probs.resize(rows * kBk);
  }
};

// Below this many rows per item (decode), scores are dot products of each key
// row read in place; above it, a transposed float32 copy of the key block
// lets every row's scores be plain vector FMAs.
constexpr int64_t kDirectRows = 8;

void forward_item(const AttentionParams& p, const Dims& d, const View4& out, float* lse,
                  int64_t b, int64_t hk, int64_t q0, int64_t nq, ForwardScratch& s) {
  const int64_t rows = d.G * nq;
  s.size(rows, d);
  auto head = [&](int64_t r) { return hk * d.G + r / nq; };
  auto query = [&](int64_t r) { return q0 + r % nq; };
  for (int64_t r = 0; r < rows; ++r) {
    load_f32(at_element(p.q, b, head(r), query(r), 0), p.q.dtype, p.q.strides[3], d.D,
             &s.q[r * d.D]);
  }
  std::fill(s.acc.begin(), s.acc.end(), 0.0f);
  std::fill(s.m.begin(), s.m.end(), kNegInf);
  std::fill(s.l.begin(), s.l.end(), 0.0f);
  std::vector<int64_t> active;
  active.reserve(rows);
  const int64_t last_query = q0 + nq - 1;
  const bool direct = rows < kDirectRows;

  for (int64_t k0 = 0; k0 < d.S; k0 += kBk) {
    if (p.causal && k0 > last_query) break;  // every later block is hidden too
    const int64_t nk = std::min(kBk, d.S - k0);
    active.clear();
    for (int64_t r = 0; r < rows; ++r) {
      if (bias_segment(p, b, head(r), query(r), k0, nk, &s.bias[r * kBk])) active.push_back(r);
    }
    if (active.empty()) continue;  // e.g. the unfilled part of a static KV cache

    // 1. Scores of the active rows.
    if (direct) {
      for (int64_t r : active) std::fill(&s.scores[r * kBk], &s.scores[r * kBk] + kBk, 0.0f);
      for (int64_t j = 0; j < nk; ++j) {
        const float* key = row_f32(p.k, b, hk, k0 + j, d.D, s.row.data());
        for (int64_t r : active) s.scores[r * kBk + j] = dot(&s.q[r * d.D], key, d.D);
      }
    } else {
      load_keys_transposed(p.k, b, hk, k0, nk, d.D, s.kt.data(), s.row);
      size_t t = 0;
      for (; t + kTileRows <= active.size(); t += kTileRows) {
        const float* q[kTileRows];
        float* sc[kTileRows];
        for (int64_t u = 0; u < kTileRows; ++u) {
          q[u] = &s.q[active[t + u] * d.D];
          sc[u] = &s.scores[active[t + u] * kBk];
        }
        dot_block_tile<kTileRows>(q, s.kt.data(), d.D, sc);
      }
      for (; t < active.size(); ++t) {
        dot_block(&s.q[active[t] * d.D], s.kt.data(), d.D, &s.scores[active[t] * kBk]);
      }
    }

    // 2. Online softmax: new running max, rescaled accumulators, probabilities.
    bool any = false;
    for (int64_t r : active) {
      float* sc = &s.scores[r * kBk];
      const float m_new = std::max(s.m[r], scale_bias_max(sc, &s.bias[r * kBk], p.scale));
      float* pr = &s.probs[r * kBk];
      if (m_new == kNegInf) {  // the mask and the causal rule leave nothing in this block
        std::fill(pr, pr + kBk, 0.0f);
        continue;
      }
      const float corr = exp_f32(s.m[r] - m_new);
      const float sum = exp_sum(sc, m_new, pr);
      if (corr != 1.0f) {
        float* acc = &s.acc[r * d.Dv];
        for (int64_t e = 0; e < d.Dv; ++e) acc[e] *= corr;
      }
      s.l[r] = s.l[r] * corr + sum;
      s.m[r] = m_new;
      any = true;
    }
    if (!any) continue;

    // 3. acc += P.V, each value row read once for all rows.
    if (!direct) load_rows(p.v, b, hk, k0, nk, d.Dv, s.vb.data());
    if (!direct && d.Dv % 64 == 0) {
      // Rows whose probabilities are all zero here (fully hidden by the
      // online max) still go through: a zero contributes nothing.
      size_t t = 0;
      for (; t + kTileRows <= active.size(); t += kTileRows) {
        const float* pr[kTileRows];
        float* acc[kTileRows];
        for (int64_t u = 0; u < kTileRows; ++u) {
          pr[u] = &s.probs[active[t + u] * kBk];
          acc[u] = &s.acc[active[t + u] * d.Dv];
        }
        pv_tile<kTileRows>(pr, s.vb.data(), nk, d.Dv, acc);
      }
      for (; t < active.size(); ++t) {
        const float* pr[1] = {&s.probs[active[t] * kBk]};
        float* acc[1] = {&s.acc[active[t] * d.Dv]};
        pv_tile<1>(pr, s.vb.data(), nk, d.Dv, acc);
      }
      continue;
    }
    for (int64_t j = 0; j < nk; ++j) {
      const float* value = direct ? row_f32(p.v, b, hk, k0 + j, d.Dv, s.row.data())
                                  : &s.vb[j * d.Dv];
      for (int64_t r : active) {
        const float pj = s.probs[r * kBk + j];
        if (pj != 0.0f) axpy(pj, value, &s.acc[r * d.Dv], d.Dv);
      }
    }
  }

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = head(r), i = query(r);
    const float l = s.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row that sees no key outputs zeros
    void* dst = const_cast<char*>(at_element(out, b, h, i, 0));
    store_f32(dst, out.dtype, out.strides[3], d.Dv, &s.acc[r * d.Dv], inv);
    if (lse) lse[(b * d.Hq + h) * d.L + i] = l > 0.0f ? s.m[r] + std::log(l) : kNegInf;
  }
}

struct BackwardScratch {
  std::vector<float> q, dout, delta, lse, dq, kt, kb, vt, dk, dv, bias, row;
};

void backward_item(const AttentionParams& p, const Dims& d, const View4& out, const float* lse,
                   const View4& grad_out, const AttentionGrads& g, int64_t b, int64_t hk,
                   BackwardScratch& s) {
  const int64_t rows = d.G * d.L;
  auto head = [&](int64_t r) { return hk * d.G + r / d.L; };
  auto query = [&](int64_t r) { return r % d.L; };
  s.q.resize(rows * d.D);
  s.dout.resize(rows * d.Dv);
  s.delta.resize(rows);
  s.lse.resize(rows);
  s.dq.assign(rows * d.D, 0.0f);
  s.kt.resize(d.D * kBk);
  s.kb.resize(kBk * d.D);
  s.vt.resize(d.Dv * kBk);
  s.dk.resize(kBk * d.D);
  s.dv.resize(kBk * d.Dv);
  s.bias.resize(kBk);
  std::vector<float> o(d.Dv);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = head(r), i = query(r);
    load_f32(at_element(p.q, b, h, i, 0), p.q.dtype, p.q.strides[3], d.D, &s.q[r * d.D]);
    float* dout = &s.dout[r * d.Dv];
    load_f32(at_element(grad_out, b, h, i, 0), grad_out.dtype, grad_out.strides[3], d.Dv, dout);
    load_f32(at_element(out, b, h, i, 0), out.dtype, out.strides[3], d.Dv, o.data());
    float delta = 0.0f;
    for (int64_t e = 0; e < d.Dv; ++e) delta += dout[e] * o[e];
    s.delta[r] = delta;
    s.lse[r] = lse[(b * d.Hq + h) * d.L + i];
  }
  float sc[kBk], pr[kBk], dp[kBk], ds[kBk];

  for (int64_t k0 = 0; k0 < d.S; k0 += kBk) {
    const int64_t nk = std::min(kBk, d.S - k0);
    std::fill(s.dk.begin(), s.dk.end(), 0.0f);
    std::fill(s.dv.begin(), s.dv.end(), 0.0f);
    bool loaded = false;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = head(r), i = query(r);
      if (p.causal && k0 > i) continue;
      if (s.lse[r] == kNegInf) continue;  // the row saw no key: no gradient
      if (!bias_segment(p, b, h, i, k0, nk, s.bias.data())) continue;
      if (!loaded) {
        load_keys_transposed(p.k, b, hk, k0, nk, d.D, s.kt.data(), s.row);
        load_rows(p.k, b, hk, k0, nk, d.D, s.kb.data());
        load_keys_transposed(p.v, b, hk, k0, nk, d.Dv, s.vt.data(), s.row);
        loaded = true;
      }
      const float* q = &s.q[r * d.D];
      const float* dout = &s.dout[r * d.Dv];
      dot_block(q, s.kt.data(), d.D, sc);
      dot_block(dout, s.vt.data(), d.Dv, dp);
      for (int64_t j = 0; j < kBk; ++j) {
        pr[j] = exp_f32(sc[j] * p.scale + s.bias[j] - s.lse[r]);
        ds[j] = pr[j] * (dp[j] - s.delta[r]);
      }
      float* dq = &s.dq[r * d.D];
      for (int64_t j = 0; j < nk; ++j) {
        if (pr[j] == 0.0f) continue;
        axpy(pr[j], dout, &s.dv[j * d.Dv], d.Dv);
        axpy(ds[j], q, &s.dk[j * d.D], d.D);
        axpy(ds[j], &s.kb[j * d.D], dq, d.D);
      }
      if (g.dscores) {
        float* row = g.dscores + ((b * d.Hq + h) * d.L + i) * d.S + k0;
        std::memcpy(row, ds, nk * sizeof(float));
      }
    }
    // Every key row gets written, zeros included (no row saw it).
    for (int64_t j = 0; j < nk; ++j) {
      if (g.dk.data) {
        store_f32(const_cast<char*>(at_element(g.dk, b, hk, k0 + j, 0)), g.dk.dtype,
                  g.dk.strides[3], d.D, &s.dk[j * d.D], p.scale);
      }
      if (g.dv.data) {
        store_f32(const_cast<char*>(at_element(g.dv, b, hk, k0 + j, 0)), g.dv.dtype,
                  g.dv.strides[3], d.Dv, &s.dv[j * d.Dv], 1.0f);
      }
    }
  }
  if (g.dq.data) {
    for (int64_t r = 0; r < rows; ++r) {
      store_f32(const_cast<char*>(at_element(g.dq, b, head(r), query(r), 0)), g.dq.dtype,
                g.dq.strides[3], d.D, &s.dq[r * d.D], p.scale);
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
  parallel_for(d.B * d.Hkv * qblocks, [&](int64_t begin, int64_t end) {
    ForwardScratch s;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t qb = item % qblocks;
      const int64_t hk = (item / qblocks) % d.Hkv;
      const int64_t b = item / (qblocks * d.Hkv);
      const int64_t q0 = qb * nq;
      forward_item(p, d, out, lse, b, hk, q0, std::min(nq, d.L - q0), s);
    }
  });
}

void backward(const AttentionParams& p, const View4& out, const float* lse,
              const View4& grad_out, const AttentionGrads& g, const ParallelFor& parallel_for) {
  const Dims d = dims_of(p);
  if (d.B == 0 || d.Hkv == 0) return;
  parallel_for(d.B * d.Hkv, [&](int64_t begin, int64_t end) {
    BackwardScratch s;
    for (int64_t item = begin; item < end; ++item) {
      backward_item(p, d, out, lse, grad_out, g, item / d.Hkv, item % d.Hkv, s);
    }
  });
}

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
