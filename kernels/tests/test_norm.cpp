// Row norms against a double-precision reference: LayerNorm and RMSNorm,
// with and without weight and bias, Hugging Face's rounding of the normalized
// value, padded rows, column tails, 16-bit types and mixed weight types,
// statistics outputs, zero rows, several threads; at the level
// TORCHNEURON_ISA forces.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "neuronkernels/norm.hpp"
#include "test_buffers.hpp"

namespace nk = neuronkernels;

namespace {

using nk_test::Buffer;

struct Case {
  const char* name;
  int64_t rows, cols, pad;
  bool layer, weight, bias, round;
  nk::DType x, w, y;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

double tol(nk::DType t) { return t == nk::DType::kFloat32 ? 2e-6 : (t == nk::DType::kBFloat16 ? 1.6e-2 : 2e-3); }

class RowNorm : public ::testing::TestWithParam<Case> {};

TEST_P(RowNorm, MatchesReference) {
  const Case c = GetParam();
  const int64_t R = c.rows, C = c.cols, S = C + c.pad;
  std::mt19937 gen(7);
  std::normal_distribution<double> n01(0.5, 2.0);
  Buffer x(c.x, size_t(R * S)), y(c.y, size_t(R * S)), w(c.w, size_t(C)), b(c.w, size_t(C));
  for (size_t i = 0; i < size_t(R * S); ++i) x.set(i, n01(gen));
  for (size_t i = 0; i < size_t(C); ++i) {
    w.set(i, n01(gen));
    b.set(i, n01(gen));
  }
  for (size_t i = 0; i < size_t(R * S); ++i) y.set(i, 1234.0);  // the padding must stay
  std::vector<float> mean(static_cast<size_t>(R)), rstd(static_cast<size_t>(R));
  nk::RowNormParams p;
  p.rows = R;
  p.cols = C;
  p.subtract_mean = c.layer;
  p.eps = 1e-5f;
  p.x = {x.data(), c.x, S};
  p.y = {y.data(), c.y, S};
  if (c.weight) p.weight = {w.data(), c.w};
  if (c.bias) p.bias = {b.data(), c.w};
  p.round_normalized = c.round;
  p.normalized_dtype = c.x;
  p.mean = mean.data();
  p.rstd = rstd.data();
  nk::row_norm(p, nk_test::threaded_for);
  for (int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; ++j) m += x.get(size_t(r * S + j));
    m = c.layer ? m / double(C) : 0.0;
    for (int64_t j = 0; j < C; ++j) v += (x.get(size_t(r * S + j)) - m) * (x.get(size_t(r * S + j)) - m);
    const double rs = 1.0 / std::sqrt(v / double(C) + 1e-5);
    ASSERT_NEAR(rstd[size_t(r)], rs, 2e-6 * rs) << "rstd of row " << r;
    if (c.layer) { ASSERT_NEAR(mean[size_t(r)], m, 1e-5 * (1 + std::fabs(m))) << "mean of row " << r; }
    for (int64_t j = 0; j < C; ++j) {
      double want = (x.get(size_t(r * S + j)) - m) * rs;
      if (c.round) want = nk_test::rounded(want, c.x);
      if (c.weight) want *= w.get(size_t(j));
      if (c.bias) want += b.get(size_t(j));
      const double t = tol(c.y) + (c.round ? tol(c.x) : 0.0);
      ASSERT_NEAR(y.get(size_t(r * S + j)), want, t * (1 + std::fabs(want))) << "row " << r << " col " << j;
    }
    for (int64_t j = C; j < S; ++j) {
      ASSERT_EQ(y.get(size_t(r * S + j)), nk_test::rounded(1234.0, c.y)) << "padding of row " << r;
    }
  }
}

using D = nk::DType;
INSTANTIATE_TEST_SUITE_P(
    Cases, RowNorm,
    ::testing::Values(
        Case{"rms_f32", 5, 64, 0, false, true, false, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"rms_f32_tail_padded", 7, 77, 3, false, true, false, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"rms_no_weight", 3, 33, 0, false, false, false, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"rms_hf_bf16", 4, 96, 0, false, true, false, true, D::kBFloat16, D::kBFloat16, D::kBFloat16},
        Case{"rms_hf_f16_weight_f32", 4, 40, 0, false, true, false, true, D::kFloat16, D::kFloat32, D::kFloat32},
        Case{"rms_hf_bf16_tail_padded", 5, 77, 3, false, true, false, true, D::kBFloat16, D::kBFloat16, D::kBFloat16},
        Case{"layer_f16_tail", 3, 40, 1, true, true, true, false, D::kFloat16, D::kFloat16, D::kFloat16},
        Case{"layer_f32", 6, 130, 2, true, true, true, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"layer_bf16", 9, 64, 0, true, true, true, false, D::kBFloat16, D::kBFloat16, D::kBFloat16},
        Case{"layer_bf16_weight_f32", 2, 48, 0, true, true, true, false, D::kBFloat16, D::kFloat32, D::kBFloat16},
        Case{"layer_no_affine", 3, 5, 0, true, false, false, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"one_column", 4, 1, 0, true, true, true, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"many_rows_threads", 300, 256, 0, false, true, false, false, D::kFloat32, D::kFloat32, D::kFloat32},
        Case{"zero_rows", 0, 16, 0, false, true, false, false, D::kFloat32, D::kFloat32, D::kFloat32}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RowNormArgs, BadStridesAreRefused) {
  float x[8] = {}, y[8] = {};
  nk::RowNormParams p;
  p.rows = 2;
  p.cols = 4;
  p.x = {x, nk::DType::kFloat32, 2};
  p.y = {y, nk::DType::kFloat32, 4};
  EXPECT_THROW(nk::row_norm(p), nk::KernelError);
}

}  // namespace
