// Attention kernels against a naive double-precision reference: causal,
// padded, sliding-window and broadcast masks, grouped-query heads, strided
// inputs, 16-bit types, zero sizes, forward and backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "neuronkernels/attention.hpp"
#include "../src/numeric.hpp"
#include "test_buffers.hpp"

namespace nk = neuronkernels;

namespace {

using nk_test::Buffer;
using nk_test::threaded_for;

// kCausalBroadcast: the causal rule as a mask of one batch and head (how a
// traced model passes it), many whole blocks of zeros and of -inf.
// kRowBroadcast: one padding row for every query (a mask [B, 1, 1, S]).
enum class MaskKind { kNone, kPadding, kRandom, kSlidingWindow, kHeadBroadcast, kAllHiddenRow, kCausalBroadcast,
                      kRowBroadcast };

struct Case {
  const char* name;
  int64_t B, Hq, Hkv, L, S, D, Dv;
  bool causal;
  MaskKind mask;
  nk::DType dtype;
  bool transposed_q;  // q laid out as [B, L, Hq, D] (how attention layers produce it)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

nk::View4 contiguous(Buffer& buf, std::array<int64_t, 4> sizes) {
  nk::View4 v;
  v.data = buf.data();
  v.dtype = buf.dtype;
  v.sizes = sizes;
  v.strides = {sizes[1] * sizes[2] * sizes[3], sizes[2] * sizes[3], sizes[3], 1};
  return v;
}

double at(const Buffer& buf, const nk::View4& v, int64_t a, int64_t b, int64_t c, int64_t d) {
  return buf.get(size_t(v.offset(a, b, c, d)));
}

struct Problem {
  Case c;
  Buffer q, k, v, mask, dout;
  nk::AttentionParams p;
  nk::View4 dout_view;

  explicit Problem(const Case& cs)
      : c(cs),
        q(cs.dtype, cs.B * cs.Hq * cs.L * cs.D),
        k(cs.dtype, cs.B * cs.Hkv * cs.S * cs.D),
        v(cs.dtype, cs.B * cs.Hkv * cs.S * cs.Dv),
        mask(cs.dtype, cs.B * cs.Hq * cs.L * cs.S),
        dout(cs.dtype, cs.B * cs.Hq * cs.L * cs.Dv) {
    std::mt19937 gen(1234);
    std::normal_distribution<double> n01(0.0, 1.0);
    for (auto* b : {&q, &k, &v, &dout}) {
      for (size_t i = 0; i < b->bytes.size() / nk::dtype_size(b->dtype); ++i) b->set(i, n01(gen));
    }
    if (c.transposed_q) {  // memory [B, L, Hq, D], viewed as [B, Hq, L, D]
      p.q.data = q.data();
      p.q.dtype = c.dtype;
      p.q.sizes = {c.B, c.Hq, c.L, c.D};
      p.q.strides = {c.L * c.Hq * c.D, c.D, c.Hq * c.D, 1};
    } else {
      p.q = contiguous(q, {c.B, c.Hq, c.L, c.D});
    }
    p.k = contiguous(k, {c.B, c.Hkv, c.S, c.D});
    p.v = contiguous(v, {c.B, c.Hkv, c.S, c.Dv});
    p.causal = c.causal;
    p.scale = float(1.0 / std::sqrt(double(c.D)));
    dout_view = contiguous(dout, {c.B, c.Hq, c.L, c.Dv});
    const double inf = std::numeric_limits<double>::infinity();
    if (c.mask != MaskKind::kNone) {
      p.mask = contiguous(mask, {c.B, c.Hq, c.L, c.S});
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
          for (int64_t i = 0; i < c.L; ++i)
            for (int64_t j = 0; j < c.S; ++j) {
              double m = 0;
              switch (c.mask) {
                case MaskKind::kPadding:  // left padding of b keys, a static cache filled to L + 3
                  m = (j < b || j > i + 3) ? -inf : 0.0;
                  break;
                case MaskKind::kRandom: m = n01(gen); break;
                case MaskKind::kSlidingWindow: m = (j > i || j + 5 <= i) ? -inf : 0.0; break;
                case MaskKind::kHeadBroadcast: m = (j <= i + (c.S - c.L)) ? 0.0 : -inf; break;
                case MaskKind::kAllHiddenRow: m = (i == 1) ? -inf : 0.0; break;
                case MaskKind::kCausalBroadcast: m = j <= i ? 0.0 : -inf; break;
                case MaskKind::kRowBroadcast: m = j < 70 * b ? -inf : 0.0; break;
                case MaskKind::kNone: break;
              }
              mask.set(size_t(p.mask.offset(b, h, i, j)), m);
            }
      if (c.mask == MaskKind::kHeadBroadcast) p.mask.strides[1] = 0;  // every head reads head 0
      if (c.mask == MaskKind::kCausalBroadcast) p.mask.strides[0] = p.mask.strides[1] = 0;
      if (c.mask == MaskKind::kRowBroadcast) p.mask.strides[1] = p.mask.strides[2] = 0;
    }
  }

  double mask_at(int64_t b, int64_t h, int64_t i, int64_t j) const {
    double m = p.mask.data ? at(mask, p.mask, b, h, i, j) : 0.0;
    if (c.causal && j > i) m = -std::numeric_limits<double>::infinity();
    return m;
  }

  // Reference: probabilities of row (b, h, i), or all zero if it sees no key.
  std::vector<double> probs(int64_t b, int64_t h, int64_t i, double* lse) const {
    const int64_t hk = h / (c.Hq / c.Hkv);
    std::vector<double> s(c.S);
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < c.S; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < c.D; ++d) dot += at(q, p.q, b, h, i, d) * at(k, p.k, b, hk, j, d);
      s[j] = dot * p.scale + mask_at(b, h, i, j);
      mx = std::max(mx, s[j]);
    }
    if (std::isinf(mx)) {
      *lse = mx;
      return std::vector<double>(c.S, 0.0);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - mx));
    for (auto& x : s) x /= sum;
    *lse = mx + std::log(sum);
    return s;
  }
};

double tolerance(nk::DType t) { return t == nk::DType::kFloat32 ? 2e-5 : (t == nk::DType::kFloat16 ? 4e-3 : 3e-2); }

class AttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchReference) {
  const Case c = GetParam();
  Problem pb(c);
  Buffer out(c.dtype, c.B * c.Hq * c.L * c.Dv);
  nk::View4 out_view = contiguous(out, {c.B, c.Hq, c.L, c.Dv});
  std::vector<float> lse(c.B * c.Hq * c.L, 7.0f);
  nk::attention_forward(pb.p, out_view, lse.data(), threaded_for);

  const double tol = tolerance(c.dtype);
  const int64_t G = c.Hkv ? c.Hq / c.Hkv : 1;
  std::vector<double> dq(c.B * c.Hq * c.L * c.D), dk(c.B * c.Hkv * c.S * c.D),
      dv(c.B * c.Hkv * c.S * c.Dv), dmask(c.B * c.Hq * c.L * c.S);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.Hq; ++h)
      for (int64_t i = 0; i < c.L; ++i) {
        const int64_t hk = h / G;
        double ref_lse;
        auto P = pb.probs(b, h, i, &ref_lse);
        if (std::isinf(ref_lse)) {
          EXPECT_TRUE(std::isinf(lse[(b * c.Hq + h) * c.L + i])) << "row " << i;
        } else {
          EXPECT_NEAR(lse[(b * c.Hq + h) * c.L + i], ref_lse, 1e-4 + tol * std::abs(ref_lse));
        }
        std::vector<double> o(c.Dv, 0.0);
        for (int64_t e = 0; e < c.Dv; ++e) {
          for (int64_t j = 0; j < c.S; ++j) o[e] += P[j] * at(pb.v, pb.p.v, b, hk, j, e);
          ASSERT_NEAR(at(out, out_view, b, h, i, e), o[e], tol * (1 + std::abs(o[e])))
              << "out b=" << b << " h=" << h << " i=" << i << " e=" << e;
        }
        // Reference backward of this row.
        double delta = 0;
        for (int64_t e = 0; e < c.Dv; ++e) delta += at(pb.dout, pb.dout_view, b, h, i, e) * o[e];
        for (int64_t j = 0; j < c.S; ++j) {
          double dp = 0;
          for (int64_t e = 0; e < c.Dv; ++e) {
            double g = at(pb.dout, pb.dout_view, b, h, i, e);
            dp += g * at(pb.v, pb.p.v, b, hk, j, e);
            dv[((b * c.Hkv + hk) * c.S + j) * c.Dv + e] += P[j] * g;
          }
          double ds = P[j] * (dp - delta);
          dmask[((b * c.Hq + h) * c.L + i) * c.S + j] = ds;
          for (int64_t d = 0; d < c.D; ++d) {
            dq[((b * c.Hq + h) * c.L + i) * c.D + d] += ds * pb.p.scale * at(pb.k, pb.p.k, b, hk, j, d);
            dk[((b * c.Hkv + hk) * c.S + j) * c.D + d] += ds * pb.p.scale * at(pb.q, pb.p.q, b, h, i, d);
          }
        }
      }

  Buffer gq(c.dtype, dq.size()), gk(c.dtype, dk.size()), gv(c.dtype, dv.size());
  // Poison the outputs: the kernel must write every element.
  for (Buffer* b : {&gq, &gk, &gv}) {
    if (!b->bytes.empty()) std::memset(b->data(), 0x7f, b->bytes.size());
  }
  std::vector<float> gmask(dmask.size(), 0.0f);
  nk::AttentionGrads g;
  g.dq = contiguous(gq, {c.B, c.Hq, c.L, c.D});
  g.dk = contiguous(gk, {c.B, c.Hkv, c.S, c.D});
  g.dv = contiguous(gv, {c.B, c.Hkv, c.S, c.Dv});
  g.dscores = gmask.data();
  nk::attention_backward(pb.p, out_view, lse.data(), pb.dout_view, g, threaded_for);
  // Gradients sum over rows and keys: the 16-bit tolerance scales with magnitude.
  auto check = [&](const char* what, const Buffer& got, const std::vector<double>& want) {
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got.get(i), want[i], 2 * tol * (1 + std::abs(want[i]))) << what << "[" << i << "]";
    }
  };
  check("dq", gq, dq);
  check("dk", gk, dk);
  check("dv", gv, dv);
  for (size_t i = 0; i < dmask.size(); ++i) {
    ASSERT_NEAR(gmask[i], dmask[i], 2 * tol * (1 + std::abs(dmask[i]))) << "dscores[" << i << "]";
  }
}

using D = nk::DType;
INSTANTIATE_TEST_SUITE_P(
    Cases, AttentionTest,
    ::testing::Values(
        Case{"plain", 2, 4, 4, 7, 9, 16, 16, false, MaskKind::kNone, D::kFloat32, false},
        Case{"causal_prefill", 1, 2, 2, 130, 130, 32, 32, true, MaskKind::kNone, D::kFloat32, true},
        Case{"causal_gqa", 2, 6, 2, 70, 70, 64, 64, true, MaskKind::kNone, D::kFloat32, true},
        Case{"decode_static_cache", 3, 8, 2, 1, 200, 64, 64, false, MaskKind::kPadding, D::kFloat32, true},
        Case{"padded_prefill", 3, 4, 1, 20, 150, 32, 32, false, MaskKind::kPadding, D::kFloat32, false},
        Case{"random_bias", 2, 3, 3, 9, 70, 24, 40, false, MaskKind::kRandom, D::kFloat32, false},
        Case{"sliding_window", 1, 4, 2, 100, 100, 16, 16, false, MaskKind::kSlidingWindow, D::kFloat32, false},
        Case{"head_broadcast_mask", 2, 4, 2, 5, 69, 32, 32, false, MaskKind::kHeadBroadcast, D::kFloat32, true},
        Case{"unmasked_full_blocks", 1, 2, 1, 50, 130, 64, 64, false, MaskKind::kNone, D::kFloat32, false},
        Case{"decode_odd_head_size", 2, 4, 2, 1, 150, 20, 12, false, MaskKind::kPadding, D::kFloat32, false},
        Case{"fully_hidden_row", 1, 2, 1, 4, 8, 8, 8, false, MaskKind::kAllHiddenRow, D::kFloat32, false},
        Case{"causal_as_mask", 2, 6, 2, 200, 200, 32, 32, false, MaskKind::kCausalBroadcast, D::kFloat32, true},
        Case{"bf16_causal_as_mask", 1, 4, 2, 130, 130, 64, 64, false, MaskKind::kCausalBroadcast, D::kBFloat16,
             false},
        Case{"padding_row_broadcast", 3, 4, 2, 9, 200, 16, 16, false, MaskKind::kRowBroadcast, D::kFloat32, false},
        Case{"causal_more_keys", 1, 2, 2, 3, 10, 8, 8, true, MaskKind::kNone, D::kFloat32, false},
        Case{"causal_more_queries", 1, 2, 2, 10, 3, 8, 8, true, MaskKind::kNone, D::kFloat32, false},
        Case{"bf16_causal_gqa", 1, 4, 2, 66, 66, 64, 64, true, MaskKind::kNone, D::kBFloat16, true},
        Case{"bf16_decode", 2, 4, 4, 1, 100, 32, 32, false, MaskKind::kPadding, D::kBFloat16, false},
        // keys and values read in place at every level: three query heads a KV head
        Case{"bf16_decode_gqa", 3, 12, 4, 1, 150, 64, 64, false, MaskKind::kPadding, D::kBFloat16, true},
        // in place on the 8- and 4-lane levels, converted on AVX-512 (24 is not 16k)
        Case{"f16_decode_gqa_24", 2, 6, 2, 1, 90, 24, 24, false, MaskKind::kPadding, D::kFloat16, false},
        Case{"f16_padded", 2, 2, 1, 6, 70, 16, 16, false, MaskKind::kPadding, D::kFloat16, false},
        Case{"no_queries", 2, 2, 2, 0, 5, 8, 8, false, MaskKind::kNone, D::kFloat32, false},
        Case{"no_keys", 2, 2, 2, 3, 0, 8, 8, false, MaskKind::kNone, D::kFloat32, false},
        Case{"no_batch", 0, 2, 2, 3, 4, 8, 8, true, MaskKind::kNone, D::kFloat32, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(AttentionArguments, RejectsHeadsThatDoNotGroup) {
  std::vector<float> q(1 * 3 * 2 * 4), k(1 * 2 * 2 * 4), v(1 * 2 * 2 * 4), out(q.size());
  nk::AttentionParams p;
  auto view = [](std::vector<float>& b, std::array<int64_t, 4> s) {
    nk::View4 v;
    v.data = b.data();
    v.sizes = s;
    v.strides = {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1};
    return v;
  };
  p.q = view(q, {1, 3, 2, 4});
  p.k = view(k, {1, 2, 2, 4});
  p.v = view(v, {1, 2, 2, 4});
  try {
    nk::attention_forward(p, view(out, {1, 3, 2, 4}), nullptr);
    FAIL() << "expected a KernelError";
  } catch (const nk::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("query heads (3) must be a multiple of key/value heads (2)"),
              std::string::npos) << e.what();
  }
}

TEST(Numeric, ExpMatchesLibm) {
  for (float x = -100.0f; x < 88.0f; x += 0.01337f) {
    float want = std::exp(x), got = nk::exp_f32(x);  // flushes to 0 below -87.34
    ASSERT_NEAR(got, want, 4e-7f * want + 2e-38f) << x;
  }
  EXPECT_EQ(nk::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(nk::exp_f32(std::nanf(""))));
}

TEST(Numeric, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(nk::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(nk::f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(nk::f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(nk::bf16_to_f32(0x4049), std::bit_cast<float>(0x40490000u));
}

}  // namespace

// The backward recomputes P = exp(s - lse) and must get the forward's scores
// s bitwise: a one-ulp difference in a score of 40 is a relative error of
// 4e-6 in P (and in dV = P^T.dO), ten times what float32 arithmetic costs.
// Each row here gets one key that dominates by at least 25, so the forward's
// normalizer l is exactly 1 and lse is exactly that key's score: the forward's
// probabilities exp(s - m) / l and the backward's exp(s - lse) are then the
// same float32 numbers, key by key, if and only if the scores are. V = I makes
// out = P; a one-hot dO per row makes column r of dV that row's backward P.
struct ScoreCase {
  const char* name;
  int64_t Hq, Hkv, L, S, D;
  bool causal, bias;
};
void PrintTo(const ScoreCase& c, std::ostream* os) { *os << c.name; }

class BackwardScoresTest : public ::testing::TestWithParam<ScoreCase> {};

TEST_P(BackwardScoresTest, BackwardProbabilitiesEqualTheForwards) {
  const ScoreCase c = GetParam();
  const int64_t G = c.Hq / c.Hkv, Dv = std::max(c.S, G * c.L);
  const D f32 = nk::DType::kFloat32;
  Buffer q(f32, c.Hq * c.L * c.D), k(f32, c.Hkv * c.S * c.D), v(f32, c.Hkv * c.S * Dv),
      mask(f32, c.Hq * c.L * c.S), dout(f32, c.Hq * c.L * Dv), out(f32, c.Hq * c.L * Dv),
      dv(f32, c.Hkv * c.S * Dv);
  std::mt19937 gen(99);
  std::normal_distribution<double> n01(0.0, 1.0);
  // Scores of about +-10 around a dominant one of about 50: key r (r < S) is
  // a multiple of row r's query, r = (h % G) * L + i counting the rows of a KV head.
  for (size_t i = 0; i < q.bytes.size() / 4; ++i) q.set(i, 3.0 * n01(gen));
  for (size_t i = 0; i < k.bytes.size() / 4; ++i) k.set(i, 0.7 * n01(gen));
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.L; ++i) {
      const int64_t r = (h % G) * c.L + i;
      if (r >= std::min<int64_t>(c.S, 64)) continue;  // the first key block: m never moves on
      for (int64_t e = 0; e < c.D; ++e) {
        k.set(size_t(((h / G) * c.S + r) * c.D + e), 2.0 * q.get(size_t((h * c.L + i) * c.D + e)) + 0.1 * n01(gen));
      }
    }
  for (int64_t hk = 0; hk < c.Hkv; ++hk)
    for (int64_t j = 0; j < c.S; ++j)
      for (int64_t e = 0; e < Dv; ++e) v.set(size_t((hk * c.S + j) * Dv + e), j == e ? 1.0 : 0.0);
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.L; ++i)
      for (int64_t e = 0; e < Dv; ++e) {
        dout.set(size_t((h * c.L + i) * Dv + e), e == (h % G) * c.L + i ? 1.0 : 0.0);
      }
  for (size_t i = 0; i < mask.bytes.size() / 4; ++i) mask.set(i, n01(gen));

  nk::AttentionParams p;
  p.q = contiguous(q, {1, c.Hq, c.L, c.D});
  p.k = contiguous(k, {1, c.Hkv, c.S, c.D});
  p.v = contiguous(v, {1, c.Hkv, c.S, Dv});
  if (c.bias) p.mask = contiguous(mask, {1, c.Hq, c.L, c.S});
  p.causal = c.causal;
  p.scale = float(1.0 / std::sqrt(double(c.D)));
  const nk::View4 out_view = contiguous(out, {1, c.Hq, c.L, Dv});
  std::vector<float> lse(c.Hq * c.L);
  nk::attention_forward(p, out_view, lse.data(), threaded_for);
  nk::AttentionGrads g;
  g.dv = contiguous(dv, {1, c.Hkv, c.S, Dv});
  nk::attention_backward(p, out_view, lse.data(), contiguous(dout, {1, c.Hq, c.L, Dv}), g,
                         threaded_for);

  int64_t rows_checked = 0, small_probs = 0;
  for (int64_t h = 0; h < c.Hq; ++h)
    for (int64_t i = 0; i < c.L; ++i) {
      // Which key dominates, and by how much (in double, as the kernel sees it).
      std::vector<double> s(c.S);
      for (int64_t j = 0; j < c.S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < c.D; ++e) {
          dot += q.get(size_t((h * c.L + i) * c.D + e)) * k.get(size_t(((h / G) * c.S + j) * c.D + e));
        }
        s[j] = dot * p.scale + (c.bias ? mask.get(size_t((h * c.L + i) * c.S + j)) : 0.0);
        if (c.causal && j > i) s[j] = -INFINITY;
      }
      const int64_t top = std::max_element(s.begin(), s.end()) - s.begin();
      double second = -INFINITY;
      for (int64_t j = 0; j < c.S; ++j) {
        if (j != top) second = std::max(second, s[j]);
      }
      if (top >= 64 || s[top] - second < 25.0) continue;
      ++rows_checked;
      const int64_t col = (h % G) * c.L + i;
      for (int64_t j = 0; j < c.S; ++j) {
        const float fwd = float(out.get(size_t((h * c.L + i) * Dv + j)));
        const float bwd = float(dv.get(size_t(((h / G) * c.S + j) * Dv + col)));
        ASSERT_EQ(fwd, bwd) << "h=" << h << " i=" << i << " key " << j << " (score " << s[j]
                            << ", top " << s[top] << ")";
        small_probs += fwd > 0.0f && fwd < 1e-12f;
      }
    }
  // The comparison means something: many rows qualify, and they hold
  // probabilities far below 1 that carry their scores' rounding.
  EXPECT_GE(rows_checked, (c.Hq * c.L + 3) / 4);
  EXPECT_GT(small_probs, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BackwardScoresTest,
    ::testing::Values(
        // Few rows per KV head: the forward's direct dot products.
        ScoreCase{"decode", 1, 1, 1, 6, 8, false, false},
        ScoreCase{"few_rows_bias", 1, 1, 3, 6, 8, false, true},
        ScoreCase{"decode_gqa_odd_head", 3, 1, 1, 40, 20, false, true},
        // Product tiles, one key block and several.
        ScoreCase{"rows", 2, 2, 12, 40, 8, false, false},
        ScoreCase{"rows_bias_blocks", 1, 1, 20, 150, 16, false, true},
        ScoreCase{"causal_gqa", 4, 2, 10, 10, 64, true, false}),
    [](const ::testing::TestParamInfo<ScoreCase>& info) { return std::string(info.param.name); });
