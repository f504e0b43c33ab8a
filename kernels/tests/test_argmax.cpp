// argmax over rows against a scalar reference of torch.argmax's rule (the
// first NaN, else the first element equal to the maximum): every position
// around the vector blocks, NaN, infinities, ties and signed zeros, padded
// rows, several threads, three dtypes; at the level TORCHNEURON_ISA forces.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "neuronkernels/argmax.hpp"
#include "test_buffers.hpp"

namespace nk = neuronkernels;

namespace {

using nk_test::Buffer;

// The reference over a row's stored values.
int64_t reference(const Buffer& b, int64_t offset, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double v = b.get(size_t(offset + i)), top = b.get(size_t(offset + best));
    if (std::isnan(top)) break;
    if (std::isnan(v) || v > top) best = i;
  }
  return best;
}

std::vector<int64_t> run(Buffer& b, int64_t rows, int64_t cols, int64_t stride, bool threads) {
  std::vector<int64_t> out(size_t(rows), -1);
  nk::ArgmaxParams p;
  p.x = b.data();
  p.dtype = b.dtype;
  p.rows = rows;
  p.cols = cols;
  p.row_stride = stride;
  p.out = out.data();
  if (threads) {
    nk::argmax_rows(p, nk_test::threaded_for);
  } else {
    nk::argmax_rows(p);
  }
  return out;
}

class Argmax : public ::testing::TestWithParam<nk::DType> {};

TEST_P(Argmax, RandomRowsOfEveryLengthAroundTheBlocks) {
  const nk::DType t = GetParam();
  std::mt19937 gen(5);
  std::normal_distribution<double> n01(0.0, 1.0);
  for (int64_t cols : {1, 2, 15, 16, 17, 31, 63, 64, 65, 100, 1000, 16001}) {
    const int64_t rows = 5, stride = cols + 3;  // padded rows: the padding holds larger values
    Buffer b(t, size_t(rows * stride));
    for (int64_t i = 0; i < rows * stride; ++i) b.set(size_t(i), i % stride >= cols ? 1e4 : n01(gen));
    const auto got = run(b, rows, cols, stride, cols > 500);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(got[size_t(r)], reference(b, r * stride, cols)) << cols << " columns";
  }
}

TEST_P(Argmax, EveryPositionOfTheMaximumAndOfANan) {
  const nk::DType t = GetParam();
  const int64_t cols = 150;
  for (int64_t pos = 0; pos < cols; ++pos) {
    Buffer b(t, size_t(2 * cols));
    for (int64_t i = 0; i < 2 * cols; ++i) b.set(size_t(i), -1.0);
    b.set(size_t(pos), 2.0);                                        // row 0: the maximum at pos
    b.set(size_t(cols + pos), std::numeric_limits<double>::quiet_NaN());  // row 1: a NaN at pos
    b.set(size_t(cols + (pos + 7) % cols), 3.0);                    // ... beside a larger value
    const auto got = run(b, 2, cols, cols, false);
    EXPECT_EQ(got[0], pos);
    EXPECT_EQ(got[1], pos);
  }
}

TEST_P(Argmax, TiesInfinitiesAndSignedZeros) {
  const nk::DType t = GetParam();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::vector<double>> rows = {
      {-inf, -inf, -inf},
      {2.0, inf, 5.0, inf},
      {-0.0, 0.0, -1.0},
      {0.0, -0.0, -1.0},
      {1.0, nan, 3.0, nan},
  };
  for (const auto& values : rows) {
    Buffer b(t, values.size());
    for (size_t i = 0; i < values.size(); ++i) b.set(i, values[i]);
    EXPECT_EQ(run(b, 1, int64_t(values.size()), int64_t(values.size()), false)[0],
              reference(b, 0, int64_t(values.size())));
  }
  // Ties spanning blocks: the first.
  Buffer b(t, 100);
  for (int i = 0; i < 100; ++i) b.set(size_t(i), i >= 37 ? 4.0 : 1.0);
  EXPECT_EQ(run(b, 1, 100, 100, false)[0], 37);
}

TEST(ArgmaxArguments, RowsOfNoElementsAndOverlappingRowsAreRefused) {
  Buffer b(nk::DType::kFloat32, 4);
  std::vector<int64_t> out(2);
  nk::ArgmaxParams p;
  p.x = b.data();
  p.rows = 2;
  p.cols = 0;
  p.row_stride = 0;
  p.out = out.data();
  EXPECT_THROW(nk::argmax_rows(p), nk::KernelError);
  p.cols = 2;
  p.row_stride = 1;
  EXPECT_THROW(nk::argmax_rows(p), nk::KernelError);
  p.rows = 0;
  EXPECT_NO_THROW(nk::argmax_rows(p));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Argmax,
                         ::testing::Values(nk::DType::kFloat32, nk::DType::kBFloat16, nk::DType::kFloat16),
                         [](const auto& info) {
                           return std::string(info.param == nk::DType::kFloat32    ? "float32"
                                              : info.param == nk::DType::kBFloat16 ? "bfloat16"
                                                                                   : "float16");
                         });

}  // namespace
