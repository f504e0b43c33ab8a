// The index of each row's maximum: greedy decoding's next token from each row
// of logits. As torch.argmax over the last dimension: the first NaN if a row
// has one (NaN is the largest), else the first element equal to the maximum
// (0.0 and -0.0 tie; the earlier wins).
#pragma once

#include <cstdint>

#include "neuronkernels/types.hpp"

namespace neuronkernels {

struct ArgmaxParams {
  const void* x = nullptr;  // rows of `cols` contiguous elements, `row_stride` elements apart
  DType dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0, row_stride = 0;
  int64_t* out = nullptr;   // one index per row
};

// Threads split the rows. Throws KernelError for rows of no elements.
void argmax_rows(const ArgmaxParams& p, const ParallelFor& parallel_for = serial_for);

}  // namespace neuronkernels
