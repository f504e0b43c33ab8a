// Matrix products with few rows — the linear layers of a decode step:
// y[M, N] = x[M, K] . w[K, N] (+ bias). With M of a handful of tokens the
// product is bound by reading w from memory once; these kernels stream each
// stretch of w through registers exactly once and let every row of x use it
// there, which is what BLAS's general GEMM does not do for tiny M.
#pragma once

#include <cstdint>

#include "neuronkernels/types.hpp"

namespace neuronkernels {

// A 2-D view of a raw buffer: sizes and strides in elements (stride 0 where
// broadcast).
struct View2 {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0;
};

// Rows of x up to which the skinny kernels beat a blocked GEMM.
constexpr int64_t kSkinnyMaxRows = 16;

struct SkinnyMatmulParams {
  View2 x;     // [M, K], col_stride 1
  View2 w;     // [K, N]: row_stride 1 (an nn.Linear weight [N, K], transposed)
               //         or col_stride 1 (row-major, e.g. GPT-2's Conv1D)
  View2 bias;  // [M, N] (stride 0 where broadcast); data null if none
  View2 y;     // [M, N], col_stride 1, not overlapping the inputs
};

// Whether skinny_matmul takes these layouts and types (all one dtype among
// float32, bfloat16 and float16; accumulation is float32).
bool skinny_matmul_supports(const SkinnyMatmulParams& p);

// y = x . w (+ bias). Threads split the columns of y.
void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& parallel_for = serial_for);

}  // namespace neuronkernels
