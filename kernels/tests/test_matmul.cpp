// Skinny matmul against a double-precision reference: both weight layouts,
// every row-group size, column and K tails, bias broadcasts, strided rows,
// 16-bit types, zero sizes, several threads — through the dispatcher, at the
// level TORCHNEURON_ISA forces (ctest runs the suite once per level).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "neuronkernels/matmul.hpp"
#include "test_buffers.hpp"

namespace nk = neuronkernels;

namespace {

using nk_test::Buffer;

enum class Bias { kNone, kColumns, kFull };

struct Case {
  const char* name;
  int64_t M, K, N;
  bool nt;  // w stored as [N, K] (an nn.Linear weight) rather than [K, N]
  Bias bias;
  nk::DType dtype;
  int64_t pad;  // extra elements at the end of each stored row of x and w
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class SkinnyMatmul : public ::testing::TestWithParam<Case> {};

void check_case(const Case& c) {
  const int64_t xld = c.K + c.pad, wld = (c.nt ? c.K : c.N) + c.pad;
  Buffer x(c.dtype, size_t(c.M * xld)), w(c.dtype, size_t((c.nt ? c.N : c.K) * wld)),
      bias(c.dtype, size_t(c.M * c.N)), y(c.dtype, size_t(c.M * c.N));
  std::mt19937 gen(7);
  std::normal_distribution<double> n01(0.0, 1.0);
  for (auto* b : {&x, &w, &bias}) {
    for (size_t i = 0; i < b->bytes.size() / nk::dtype_size(b->dtype); ++i) b->set(i, n01(gen));
  }

  nk::SkinnyMatmulParams p;
  p.x = {x.data(), c.dtype, c.M, c.K, xld, 1};
  p.w = c.nt ? nk::View2{w.data(), c.dtype, c.K, c.N, 1, wld}
             : nk::View2{w.data(), c.dtype, c.K, c.N, wld, 1};
  if (c.bias == Bias::kColumns) p.bias = {bias.data(), c.dtype, c.M, c.N, 0, 1};
  if (c.bias == Bias::kFull) p.bias = {bias.data(), c.dtype, c.M, c.N, c.N, 1};
  p.y = {y.data(), c.dtype, c.M, c.N, c.N, 1};
  ASSERT_TRUE(nk::skinny_matmul_supports(p));
  nk::skinny_matmul(p, nk_test::threaded_for);

  // float32 accumulation error grows with K; 16-bit outputs add one rounding.
  const double out_eps = c.dtype == nk::DType::kBFloat16 ? std::ldexp(1.0, -8)
                         : c.dtype == nk::DType::kFloat16 ? std::ldexp(1.0, -11) : 0.0;
  for (int64_t m = 0; m < c.M; ++m) {
    for (int64_t n = 0; n < c.N; ++n) {
      double want = 0, magnitude = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double term = x.get(size_t(m * xld + k)) *
                            w.get(size_t(c.nt ? n * wld + k : k * wld + n));
        want += term;
        magnitude += std::abs(term);
      }
      if (c.bias != Bias::kNone) {
        const double b = bias.get(size_t((c.bias == Bias::kFull ? m * c.N : 0) + n));
        want += b;
        magnitude += std::abs(b);
      }
      const double got = y.get(size_t(m * c.N + n));
      const double tol = out_eps * std::abs(want) + 1e-6 * magnitude + 1e-30;
      ASSERT_NEAR(got, want, tol) << "row " << m << ", column " << n;
    }
  }
}

TEST_P(SkinnyMatmul, MatchesReference) { check_case(GetParam()); }

TEST(SkinnyMatmulDispatch, ComputesThroughTheChosenVariant) {
  std::vector<float> x(4), w(4 * 3), y(3);
  for (int i = 0; i < 12; ++i) w[size_t(i)] = float(i);
  x = {1, 2, 3, 4};
  nk::SkinnyMatmulParams p;
  p.x = {x.data(), nk::DType::kFloat32, 1, 4, 4, 1};
  p.w = {w.data(), nk::DType::kFloat32, 4, 3, 3, 1};
  p.y = {y.data(), nk::DType::kFloat32, 1, 3, 3, 1};
  nk::skinny_matmul(p);
  EXPECT_EQ(y, (std::vector<float>{60, 70, 80}));
}

// Every level converts float16 exactly (the baseline one by integer
// arithmetic): subnormals, the largest value, signed zero, infinities and NaN
// pass through x or w into y unchanged, as one-hot products v * 1.
TEST(SkinnyMatmulFloat16, SpecialValuesPassThroughExactly) {
  const uint16_t values[] = {0x0001, 0x03ff, 0x0400, 0x3c01, 0x7bff, 0x8000,
                             0x8001, 0xfbff, 0x7c00, 0xfc00, 0x7e00};
  constexpr int64_t K = 16;
  for (const bool in_w : {false, true}) {
    for (const int64_t k0 : {0, 5, 15}) {
      for (const uint16_t v : values) {
        std::vector<uint16_t> x(K, 0), w(K, 0), y(1, 0);
        (in_w ? w : x)[size_t(k0)] = v;
        (in_w ? x : w)[size_t(k0)] = 0x3c00;  // 1.0
        nk::SkinnyMatmulParams p;
        p.x = {x.data(), nk::DType::kFloat16, 1, K, K, 1};
        p.w = {w.data(), nk::DType::kFloat16, K, 1, 1, K};
        p.y = {y.data(), nk::DType::kFloat16, 1, 1, 1, 1};
        nk::skinny_matmul(p);
        if ((v & 0x7fff) > 0x7c00) {
          EXPECT_TRUE(std::isnan(nk::f16_to_f32(y[0]))) << std::hex << v;
        } else {
          // -0 * 1 + 0 * 0 ... is +0
          EXPECT_EQ(y[0], v == 0x8000 ? 0 : v) << std::hex << v << (in_w ? " in w" : " in x");
        }
      }
    }
  }
}

using D = nk::DType;
INSTANTIATE_TEST_SUITE_P(
    Cases, SkinnyMatmul,
    ::testing::Values(
        Case{"nt_decode_f32", 1, 768, 96, true, Bias::kNone, D::kFloat32, 0},
        Case{"nt_decode_bf16", 1, 768, 96, true, Bias::kNone, D::kBFloat16, 0},
        Case{"nt_decode_f16", 1, 768, 96, true, Bias::kColumns, D::kFloat16, 0},
        Case{"nt_rows1_tails", 1, 37, 21, true, Bias::kColumns, D::kFloat32, 3},
        Case{"nt_rows1_f16_tails", 1, 45, 13, true, Bias::kNone, D::kFloat16, 1},
        Case{"nt_rows2_tails_f16", 2, 45, 23, true, Bias::kFull, D::kFloat16, 1},
        Case{"nt_rows2_bf16", 2, 64, 12, true, Bias::kNone, D::kBFloat16, 0},
        // bfloat16 column streams (one and two rows): vector steps and a scalar tail,
        // strided rows.
        Case{"nt_rows1_bf16_tails", 1, 200, 19, true, Bias::kColumns, D::kBFloat16, 3},
        Case{"nt_rows2_bf16_tails", 2, 333, 11, true, Bias::kFull, D::kBFloat16, 5},
        Case{"nt_rows3_tails_bias", 3, 37, 23, true, Bias::kColumns, D::kFloat32, 5},
        Case{"nt_rows4_bf16_tails", 4, 77, 14, true, Bias::kColumns, D::kBFloat16, 2},
        Case{"nt_rows5_bf16", 5, 130, 9, true, Bias::kFull, D::kBFloat16, 3},
        // bfloat16 column streams of 2 to 6 rows (vdpbf16ps where the CPU has it):
        // pairs of 32-element steps, a single one, a scalar tail, two passes of rows;
        // 7 rows and more on the tiles, with K, row and column tails.
        Case{"nt_rows3_bf16_odd_step", 3, 100, 9, true, Bias::kColumns, D::kBFloat16, 0},
        Case{"nt_rows6_bf16_two_passes", 6, 96, 11, true, Bias::kNone, D::kBFloat16, 2},
        Case{"nt_rows7_bf16_tails", 7, 333, 13, true, Bias::kColumns, D::kBFloat16, 3},
        Case{"nt_rows8_bf16", 8, 256, 64, true, Bias::kNone, D::kBFloat16, 0},
        Case{"nt_rows9_bf16_tails", 9, 101, 10, true, Bias::kFull, D::kBFloat16, 1},
        Case{"nt_rows7_f16", 7, 64, 10, true, Bias::kFull, D::kFloat16, 0},
        Case{"nt_rows16_f32", 16, 100, 33, true, Bias::kColumns, D::kFloat32, 0},
        Case{"nt_rows16_bf16_tails", 16, 83, 17, true, Bias::kFull, D::kBFloat16, 1},
        // whole 4 x 4 tiles (stored together on AVX-512) beside partial ones
        Case{"nt_rows8_f32_whole_tiles", 8, 128, 37, true, Bias::kFull, D::kFloat32, 3},
        Case{"nt_rows12_bf16_whole_tiles", 12, 192, 21, true, Bias::kColumns, D::kBFloat16, 1},
        Case{"nt_rows8_f16_whole_tiles", 8, 64, 16, true, Bias::kColumns, D::kFloat16, 2},
        Case{"nt_one_column", 2, 50, 1, true, Bias::kNone, D::kFloat32, 1},
        Case{"nt_short_k", 4, 3, 7, true, Bias::kNone, D::kFloat32, 0},
        Case{"nn_decode_f32", 1, 200, 256, false, Bias::kColumns, D::kFloat32, 0},
        Case{"nn_decode_bf16", 1, 200, 200, false, Bias::kNone, D::kBFloat16, 0},
        Case{"nn_rows6_tails", 6, 33, 130, false, Bias::kFull, D::kFloat32, 7},
        Case{"nn_narrow_only", 3, 20, 40, false, Bias::kColumns, D::kFloat16, 2},
        Case{"nn_rows16_bf16", 16, 40, 150, false, Bias::kFull, D::kBFloat16, 0},
        Case{"nn_rows2_f16", 2, 33, 70, false, Bias::kNone, D::kFloat16, 3},
        Case{"no_rows", 0, 16, 16, true, Bias::kNone, D::kFloat32, 0},
        Case{"no_columns", 2, 16, 0, false, Bias::kNone, D::kFloat32, 0},
        Case{"empty_k_is_bias", 2, 0, 5, true, Bias::kFull, D::kFloat32, 0}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(SkinnyMatmulArguments, RejectsMismatchedInnerSizes) {
  std::vector<float> x(2 * 3), w(4 * 5), y(2 * 5);
  nk::SkinnyMatmulParams p;
  p.x = {x.data(), D::kFloat32, 2, 3, 3, 1};
  p.w = {w.data(), D::kFloat32, 4, 5, 5, 1};
  p.y = {y.data(), D::kFloat32, 2, 5, 5, 1};
  EXPECT_FALSE(nk::skinny_matmul_supports(p));
  try {
    nk::skinny_matmul(p);
    FAIL() << "expected a KernelError";
  } catch (const nk::KernelError& e) {
    EXPECT_NE(std::string(e.what()).find("x has 3 columns but w has 4 rows"), std::string::npos)
        << e.what();
  }
}

TEST(SkinnyMatmulArguments, RejectsWeightsStridedBothWays) {
  std::vector<float> x(2 * 4), w(64), y(2 * 3);
  nk::SkinnyMatmulParams p;
  p.x = {x.data(), D::kFloat32, 2, 4, 4, 1};
  p.w = {w.data(), D::kFloat32, 4, 3, 6, 2};
  p.y = {y.data(), D::kFloat32, 2, 3, 3, 1};
  EXPECT_FALSE(nk::skinny_matmul_supports(p));
  EXPECT_THROW(nk::skinny_matmul(p), nk::KernelError);
}

}  // namespace
