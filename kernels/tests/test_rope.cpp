// Rotary embedding against a reference computed as eager computes it (each
// product and the sum rounded to the output's type): float32 bit for bit,
// 16-bit types to their rounding; broadcast cos/sin, a transposed x (a
// decode step's query viewed [B, H, S, D] over [B, S, H, D] memory), odd half
// widths, several threads; at the level TORCHNEURON_ISA forces.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "neuronkernels/rope.hpp"
#include "test_buffers.hpp"

namespace nk = neuronkernels;

namespace {

using nk_test::Buffer;

struct Case {
  const char* name;
  int64_t B, H, S, D;
  bool transposed;  // x and out as [B, S, H, D] memory
  nk::DType dtype;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

nk::View4 view(Buffer& b, const Case& c, bool transposed, bool broadcast_heads) {
  nk::View4 v;
  v.data = b.data();
  v.dtype = b.dtype;
  v.sizes = {c.B, c.H, c.S, c.D};
  if (broadcast_heads) {
    v.strides = {c.S * c.D, 0, c.D, 1};
  } else if (transposed) {
    v.strides = {c.S * c.H * c.D, c.D, c.H * c.D, 1};
  } else {
    v.strides = {c.H * c.S * c.D, c.S * c.D, c.D, 1};
  }
  return v;
}

class Rope : public ::testing::TestWithParam<Case> {};

// backward: x is the gradient of out, out the gradient of x (rope.hpp):
// dx = g * cos + cat(g2 * sin2, -(g1 * sin1)), rounded as autograd's graph.
void check_rope(const Case& c, bool backward) {
  const size_t n = size_t(c.B * c.H * c.S * c.D), nb = size_t(c.B * c.S * c.D);
  std::mt19937 gen(11);
  std::normal_distribution<double> n01(0.0, 1.0);
  Buffer x(c.dtype, n), out(c.dtype, n), cs(c.dtype, nb), sn(c.dtype, nb);
  for (size_t i = 0; i < n; ++i) x.set(i, n01(gen));
  for (size_t i = 0; i < nb; ++i) {
    const double angle = n01(gen) * 3;
    cs.set(i, std::cos(angle));
    sn.set(i, std::sin(angle));
  }
  nk::RopeParams p{view(x, c, c.transposed, false), view(cs, c, false, true), view(sn, c, false, true),
                   view(out, c, c.transposed, false), backward};
  nk::rope(p, nk_test::threaded_for);
  const int64_t h2 = c.D / 2;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t s = 0; s < c.S; ++s)
        for (int64_t d = 0; d < c.D; ++d) {
          auto at = [&](const nk::View4& v, int64_t dd) { return size_t(v.offset(b, h, s, dd)); };
          const double xv = x.get(at(p.x, d));
          const double rot = d < h2 ? -x.get(at(p.x, d + h2)) : x.get(at(p.x, d - h2));
          // float32 arithmetic, each result rounded to the type, as eager's ops.
          const float a = float(nk_test::rounded(double(float(xv) * float(cs.get(at(p.cos, d)))), c.dtype));
          const int64_t other = d < h2 ? d + h2 : d - h2;
          const float moved = float(
              nk_test::rounded(double(float(x.get(at(p.x, other))) * float(sn.get(at(p.sin, other)))), c.dtype));
          const float r = backward ? (d < h2 ? moved : -moved)
                                   : float(nk_test::rounded(double(float(rot) * float(sn.get(at(p.sin, d)))), c.dtype));
          const double want = nk_test::rounded(double(a + r), c.dtype);
          ASSERT_EQ(out.get(at(p.out, d)), want) << "b " << b << " h " << h << " s " << s << " d " << d;
        }
}

TEST_P(Rope, MatchesEagerRounding) { check_rope(GetParam(), false); }

TEST_P(Rope, BackwardMatchesAutogradsRounding) { check_rope(GetParam(), true); }

using D = nk::DType;
INSTANTIATE_TEST_SUITE_P(
    Cases, Rope,
    ::testing::Values(Case{"f32", 2, 3, 5, 64, false, D::kFloat32},
                      Case{"f32_decode_transposed", 2, 4, 1, 128, true, D::kFloat32},
                      Case{"f32_odd_half", 1, 2, 3, 14, false, D::kFloat32},
                      Case{"bf16", 2, 2, 4, 32, true, D::kBFloat16},
                      Case{"f16", 1, 3, 2, 16, false, D::kFloat16},
                      // whole vectors of every level and a tail in each half
                      Case{"bf16_vectors_and_tail", 2, 3, 2, 42, false, D::kBFloat16},
                      Case{"f16_vectors_and_tail", 1, 2, 3, 42, true, D::kFloat16},
                      Case{"bf16_decode_transposed", 8, 12, 1, 128, true, D::kBFloat16},
                      Case{"f32_threads", 2, 8, 64, 64, false, D::kFloat32},
                      Case{"zero_length", 2, 2, 0, 8, false, D::kFloat32}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RopeArgs, AnOddWidthIsRefused) {
  float x[6] = {};
  nk::View4 v{x, nk::DType::kFloat32, {1, 1, 2, 3}, {6, 6, 3, 1}};
  EXPECT_THROW(nk::rope({v, v, v, v}), nk::KernelError);
}

}  // namespace
