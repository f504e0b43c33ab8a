// The reduction kernels against the scalar reference, and the float16 /
// bfloat16 conversions against the compiler's and a neighbour search.
#include <gtest/gtest.h>

#include <random>

#include "reduce_kernels.hpp"
#include "reference.hpp"

namespace {

using namespace neuroncoll;

TEST(Conversions, HalfToFloatEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = nctest::ref_half_to_float(static_cast<uint16_t>(h));
    const float got = algorithms::half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << h;
    }
  }
}

TEST(Conversions, FloatToHalfAndBFloat16RoundToNearestEven) {
  std::mt19937 gen(7);
  std::vector<float> values = {0.f, -0.f, 1.f, 65504.f, 65520.f, 1e-8f, 6e-8f, 3e-5f, 1e30f,
                               -1e30f, INFINITY, -INFINITY, 1.00048828125f, 1.001953125f};
  for (int i = 0; i < 200000; ++i) values.push_back(std::bit_cast<float>(static_cast<uint32_t>(gen())));
  for (float f : values) {
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(algorithms::half_to_float(algorithms::float_to_half(f))));
      EXPECT_TRUE(std::isnan(algorithms::bfloat16_to_float(algorithms::float_to_bfloat16(f))));
      continue;
    }
    ASSERT_EQ(algorithms::float_to_half(f), nctest::ref_float_to_half(f)) << f;
    ASSERT_EQ(algorithms::float_to_bfloat16(f), nctest::ref_float_to_bf16(f)) << f;
  }
}

TEST(Kernels, EveryDTypeAndOpMatchesReference) {
  for (DType d : nctest::kAllDTypes) {
    for (ReduceOp op : nctest::kAllOps) {
      if (!op_supported(d, op)) continue;
      for (int n : {1, 2, 3, 8}) {
        for (size_t count : {size_t(0), size_t(1), size_t(255), size_t(1029)}) {
          std::vector<std::vector<uint8_t>> in;
          std::vector<const void*> srcs;
          std::vector<double> scales;
          for (int r = 0; r < n; ++r) in.push_back(nctest::make_input(d, r, count));
          for (int r = 0; r < n; ++r) {
            srcs.push_back(in[r].data());
            scales.push_back(nctest::premul_factor(r));
          }
          const auto want = nctest::reference_reduce(d, op, in, count);
          std::vector<uint8_t> out(count * dtype_size(d) + 1);
          algorithms::reduce(d, op, out.data(), srcs.data(), scales.data(), n, count, n);
          const std::string what = std::string(reduce_op_name(op)) + " n=" + std::to_string(n);
          ASSERT_EQ(nctest::compare_bytes(d, out.data(), want.data(), count, what), "");
          // In place: the output is the last source.
          algorithms::reduce(d, op, in[n - 1].data(), srcs.data(), scales.data(), n, count, n);
          ASSERT_EQ(nctest::compare_bytes(d, in[n - 1].data(), want.data(), count, what + " in place"), "");
        }
      }
    }
  }
}

TEST(Kernels, OpSupport) {
  EXPECT_FALSE(op_supported(DType::kFloat32, ReduceOp::kBitwiseAnd));
  EXPECT_FALSE(op_supported(DType::kInt32, ReduceOp::kPremulSum));
  EXPECT_FALSE(op_supported(DType::kBool, ReduceOp::kAvg));
  EXPECT_TRUE(op_supported(DType::kBool, ReduceOp::kBitwiseXor));
  EXPECT_TRUE(op_supported(DType::kBFloat16, ReduceOp::kPremulSum));
}

}  // namespace
