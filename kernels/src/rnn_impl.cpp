// Recurrent cells' pointwise math on one instruction set (see rnn.hpp).
//
// Each row is processed in chunks of kChunk columns: the chunk of every gate
// is converted to float32 into small arrays, the activations run over them in
// vectors of the level's width (exp_vec of attention_vec.hpp, branch-free),
// and results are rounded once when stored. The cells are memory-bound (a
// few dozen flops per loaded element), so each element is loaded once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "rnn_impl.hpp"

#include "isa_region_begin.hpp"

namespace neuronkernels::NK_ISA {
namespace {

#include "attention_vec.hpp"

constexpr int64_t kChunk = 64;

// Element access by storage type, compiled inside the region.
struct F32 {
  using T = float;
  static float ld(const float* p) { return *p; }
  static void st(float* p, float v) { *p = v; }
};
struct BF16 {
  using T = uint16_t;
  static float ld(const uint16_t* p) {
    uint32_t u = uint32_t(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // Round to nearest even as c10::BFloat16 does; NaN stays NaN.
  static void st(uint16_t* p, float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    *p = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 0x40u) : rounded);
  }
};
struct F16 {
  using T = uint16_t;
  static float ld(const uint16_t* p) {
    _Float16 h;
    std::memcpy(&h, p, 2);
    return float(h);
  }
  static void st(uint16_t* p, float f) {
    _Float16 h = static_cast<_Float16>(f);
    std::memcpy(p, &h, 2);
  }
};

inline vec sigmoid(vec x) { return 1.0f / (1.0f + exp_vec(-x)); }

// tanh to a few ulp, branch-free: (1 - e) / (1 + e) with e = exp(-2|x|),
// and near zero (where that cancels) the odd Taylor series, whose first
// omitted term is below 2e-9 for |x| < 0.4.
inline vec tanh_v(vec x) {
  const vec a = x < 0.0f ? -x : x;
  const vec e = exp_vec(-2.0f * a);
  const vec far = (1.0f - e) / (1.0f + e);
  const vec s = a * a;
  vec p = vsplat(21844.0f / 6081075.0f);
  p = p * s - 1382.0f / 155925.0f;
  p = p * s + 62.0f / 2835.0f;
  p = p * s - 17.0f / 315.0f;
  p = p * s + 2.0f / 15.0f;
  p = p * s - 1.0f / 3.0f;
  const vec near = a + a * s * p;
  const vec t = a < 0.4f ? near : far;
  return x < 0.0f ? -t : t;
}

template <typename E>
using Ptr = typename E::T*;

template <typename E>
Ptr<E> row(const Rows& r, int64_t b) {
  return static_cast<Ptr<E>>(r.data) + b * r.stride;
}

// Loads n elements at p (+ bias q, + bias q2, each optional) as float32.
template <typename E>
void load_sum(float* dst, const typename E::T* p, const typename E::T* q, const typename E::T* b1,
              const typename E::T* b2, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = E::ld(p + j);
  for (int64_t j = n; j < kChunk; ++j) dst[j] = 0.0f;
  if (q) for (int64_t j = 0; j < n; ++j) dst[j] += E::ld(q + j);
  if (b1) for (int64_t j = 0; j < n; ++j) dst[j] += E::ld(b1 + j);
  if (b2) for (int64_t j = 0; j < n; ++j) dst[j] += E::ld(b2 + j);
}

template <typename E>
void load(float* dst, const typename E::T* p, int64_t n) {
  const int64_t m = p ? n : 0;
  for (int64_t j = 0; j < m; ++j) dst[j] = E::ld(p + j);
  for (int64_t j = m; j < kChunk; ++j) dst[j] = 0.0f;
}

template <typename E>
void store(typename E::T* p, const float* src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) E::st(p + j, src[j]);
}

template <typename E>
void lstm_forward_rows(const LstmCellForwardParams& p, int64_t b0, int64_t b1) {
  using T = typename E::T;
  const int64_t H = p.hidden;
  const T* bi = static_cast<const T*>(p.input_bias);
  const T* bh = static_cast<const T*>(p.hidden_bias);
  float g[4][kChunk], c[kChunk], h[kChunk];
  for (int64_t b = b0; b < b1; ++b) {
    const T* ig = row<E>(p.input_gates, b);
    const T* hg = row<E>(p.hidden_gates, b);
    T* ws = row<E>(p.workspace, b);
    for (int64_t j0 = 0; j0 < H; j0 += kChunk) {
      const int64_t n = std::min(kChunk, H - j0);
      for (int k = 0; k < 4; ++k) {
        const int64_t off = k * H + j0;
        load_sum<E>(g[k], ig + off, hg + off, bi ? bi + off : nullptr, bh ? bh + off : nullptr, n);
      }
      load<E>(c, row<E>(p.cx, b) + j0, n);
      for (int64_t j = 0; j < n; j += kLanes) {
        const vec i = sigmoid(vload(g[0] + j)), f = sigmoid(vload(g[1] + j)),
                  gg = tanh_v(vload(g[2] + j)), o = sigmoid(vload(g[3] + j));
        vstore(g[0] + j, i);
        vstore(g[1] + j, f);
        vstore(g[2] + j, gg);
        vstore(g[3] + j, o);
        const vec cy = f * vload(c + j) + i * gg;
        vstore(c + j, cy);
        vstore(h + j, o * tanh_v(cy));
      }
      for (int k = 0; k < 4; ++k) store<E>(ws + k * H + j0, g[k], n);
      store<E>(row<E>(p.cy, b) + j0, c, n);
      store<E>(row<E>(p.hy, b) + j0, h, n);
    }
  }
}

template <typename E>
void lstm_backward_rows(const LstmCellBackwardParams& p, int64_t b0, int64_t b1) {
  using T = typename E::T;
  const int64_t H = p.hidden;
  float g[4][kChunk], gh[kChunk], gc[kChunk], cx[kChunk], cy[kChunk];
  for (int64_t b = b0; b < b1; ++b) {
    const T* ws = row<E>(p.workspace, b);
    T* gg = row<E>(p.grad_gates, b);
    for (int64_t j0 = 0; j0 < H; j0 += kChunk) {
      const int64_t n = std::min(kChunk, H - j0);
      for (int k = 0; k < 4; ++k) load<E>(g[k], ws + k * H + j0, n);
      load<E>(gh, p.grad_hy.data ? row<E>(p.grad_hy, b) + j0 : nullptr, n);
      load<E>(gc, p.grad_cy.data ? row<E>(p.grad_cy, b) + j0 : nullptr, n);
      load<E>(cx, row<E>(p.cx, b) + j0, n);
      load<E>(cy, row<E>(p.cy, b) + j0, n);
      for (int64_t j = 0; j < n; j += kLanes) {
        const vec i = vload(g[0] + j), f = vload(g[1] + j), c = vload(g[2] + j),
                  o = vload(g[3] + j), dh = vload(gh + j);
        const vec t = tanh_v(vload(cy + j));
        const vec dc = dh * o * (1.0f - t * t) + vload(gc + j);
        vstore(g[0] + j, dc * c * (1.0f - i) * i);
        vstore(g[1] + j, dc * vload(cx + j) * (1.0f - f) * f);
        vstore(g[2] + j, dc * i * (1.0f - c * c));
        vstore(g[3] + j, dh * t * (1.0f - o) * o);
        vstore(gc + j, dc * f);
      }
      for (int k = 0; k < 4; ++k) store<E>(gg + k * H + j0, g[k], n);
      store<E>(row<E>(p.grad_cx, b) + j0, gc, n);
    }
  }
}

template <typename E>
void gru_forward_rows(const GruCellForwardParams& p, int64_t b0, int64_t b1) {
  using T = typename E::T;
  const int64_t H = p.hidden;
  const T* bi = static_cast<const T*>(p.input_bias);
  const T* bh = static_cast<const T*>(p.hidden_bias);
  float r[kChunk], z[kChunk], in[kChunk], hn[kChunk], hx[kChunk], h[kChunk];
  for (int64_t b = b0; b < b1; ++b) {
    const T* ig = row<E>(p.input_gates, b);
    const T* hg = row<E>(p.hidden_gates, b);
    T* ws = row<E>(p.workspace, b);
    for (int64_t j0 = 0; j0 < H; j0 += kChunk) {
      const int64_t n = std::min(kChunk, H - j0);
      auto bias = [&](const T* v, int64_t k) { return v ? v + k * H + j0 : nullptr; };
      load_sum<E>(r, ig + j0, hg + j0, bias(bi, 0), bias(bh, 0), n);
      load_sum<E>(z, ig + H + j0, hg + H + j0, bias(bi, 1), bias(bh, 1), n);
      load_sum<E>(in, ig + 2 * H + j0, nullptr, bias(bi, 2), nullptr, n);
      load_sum<E>(hn, hg + 2 * H + j0, nullptr, bias(bh, 2), nullptr, n);
      load<E>(hx, row<E>(p.hx, b) + j0, n);
      for (int64_t j = 0; j < n; j += kLanes) {
        const vec rv = sigmoid(vload(r + j)), zv = sigmoid(vload(z + j));
        const vec nv = tanh_v(vload(in + j) + rv * vload(hn + j));
        vstore(r + j, rv);
        vstore(z + j, zv);
        vstore(in + j, nv);
        vstore(h + j, nv + zv * (vload(hx + j) - nv));
      }
      store<E>(ws + j0, r, n);
      store<E>(ws + H + j0, z, n);
      store<E>(ws + 2 * H + j0, in, n);
      std::memcpy(ws + 3 * H + j0, row<E>(p.hx, b) + j0, size_t(n) * sizeof(T));
      store<E>(ws + 4 * H + j0, hn, n);
      store<E>(row<E>(p.hy, b) + j0, h, n);
    }
  }
}

template <typename E>
void gru_backward_rows(const GruCellBackwardParams& p, int64_t b0, int64_t b1) {
  using T = typename E::T;
  const int64_t H = p.hidden;
  float r[kChunk], z[kChunk], nn[kChunk], hx[kChunk], hn[kChunk], go[kChunk], ghn[kChunk];
  for (int64_t b = b0; b < b1; ++b) {
    const T* ws = row<E>(p.workspace, b);
    T* gi = row<E>(p.grad_input_gates, b);
    T* gh = row<E>(p.grad_hidden_gates, b);
    for (int64_t j0 = 0; j0 < H; j0 += kChunk) {
      const int64_t n = std::min(kChunk, H - j0);
      load<E>(r, ws + j0, n);
      load<E>(z, ws + H + j0, n);
      load<E>(nn, ws + 2 * H + j0, n);
      load<E>(hx, ws + 3 * H + j0, n);
      load<E>(hn, ws + 4 * H + j0, n);
      load<E>(go, row<E>(p.grad_hy, b) + j0, n);
      for (int64_t j = 0; j < n; j += kLanes) {
        const vec rv = vload(r + j), zv = vload(z + j), nv = vload(nn + j), g = vload(go + j);
        const vec dn = g * (1.0f - zv) * (1.0f - nv * nv);
        vstore(ghn + j, dn * rv);
        vstore(r + j, dn * vload(hn + j) * (1.0f - rv) * rv);
        vstore(z + j, g * (vload(hx + j) - nv) * (1.0f - zv) * zv);
        vstore(hx + j, g * zv);
        vstore(nn + j, dn);
      }
      store<E>(gi + j0, r, n);
      store<E>(gi + H + j0, z, n);
      store<E>(gi + 2 * H + j0, nn, n);
      store<E>(gh + j0, r, n);
      store<E>(gh + H + j0, z, n);
      store<E>(gh + 2 * H + j0, ghn, n);
      store<E>(row<E>(p.grad_hx, b) + j0, hx, n);
    }
  }
}

// Rows per chunk of the parallel loop: about 64K elements of work each.
template <typename Params, typename Body>
void run_rows(const Params& p, const ParallelFor& pf, Body body) {
  const int64_t per_chunk = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, p.hidden));
  const int64_t chunks = (p.batch + per_chunk - 1) / per_chunk;
  if (chunks <= 1) {
    body(int64_t{0}, p.batch);
    return;
  }
  pf(chunks, [&](int64_t c0, int64_t c1) {
    body(c0 * per_chunk, std::min(p.batch, c1 * per_chunk));
  });
}

#define NK_RNN_BY_DTYPE(fn, p)                                        \
  switch ((p).dtype) {                                                \
    case DType::kFloat32: return fn<F32>((p), b0, b1);                \
    case DType::kBFloat16: return fn<BF16>((p), b0, b1);              \
    case DType::kFloat16: return fn<F16>((p), b0, b1);                \
  }

}  // namespace

void lstm_cell_forward(const LstmCellForwardParams& p, const ParallelFor& pf) {
  run_rows(p, pf, [&](int64_t b0, int64_t b1) { NK_RNN_BY_DTYPE(lstm_forward_rows, p) });
}

void lstm_cell_backward(const LstmCellBackwardParams& p, const ParallelFor& pf) {
  run_rows(p, pf, [&](int64_t b0, int64_t b1) { NK_RNN_BY_DTYPE(lstm_backward_rows, p) });
}

void gru_cell_forward(const GruCellForwardParams& p, const ParallelFor& pf) {
  run_rows(p, pf, [&](int64_t b0, int64_t b1) { NK_RNN_BY_DTYPE(gru_forward_rows, p) });
}

void gru_cell_backward(const GruCellBackwardParams& p, const ParallelFor& pf) {
  run_rows(p, pf, [&](int64_t b0, int64_t b1) { NK_RNN_BY_DTYPE(gru_backward_rows, p) });
}

#undef NK_RNN_BY_DTYPE

}  // namespace neuronkernels::NK_ISA

#include "isa_region_end.hpp"
