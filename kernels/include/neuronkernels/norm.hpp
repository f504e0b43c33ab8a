// Normalization of rows over their last dimension, forward: LayerNorm
// ((x - mean) * rstd * weight + bias) and RMSNorm (x * rstd * weight, rstd =
// 1 / sqrt(mean(x^2) + eps)), as compiled programs run them in one pass over
// each row instead of a reduction, a broadcast and an elementwise chain.
// Statistics and products are float32 for every storage type.
#pragma once

#include <cstdint>

#include "neuronkernels/types.hpp"

namespace neuronkernels {

// A row-major matrix: `cols` contiguous elements per row, `stride` elements
// from one row to the next.
struct RowsView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  int64_t stride = 0;
};

// A vector of `cols` contiguous elements (data null: none).
struct ColsView {
  const void* data = nullptr;
  DType dtype = DType::kFloat32;
};

struct RowNormParams {
  int64_t rows = 0, cols = 0;
  bool subtract_mean = false;  // LayerNorm; else RMSNorm
  float eps = 0.0f;
  RowsView x;
  // RMSNorm as Hugging Face writes it (`weight * (x * rstd).to(dtype)`): the
  // normalized value is rounded to this type before the weight multiplies it.
  // Unset: no rounding between the two (LayerNorm, torch's rms_norm).
  bool round_normalized = false;
  DType normalized_dtype = DType::kFloat32;
  ColsView weight;  // optional
  ColsView bias;    // optional (LayerNorm)
  RowsView y;
  // Optional per-row statistics (LayerNorm's saved mean and rstd, RMSNorm's
  // rstd): `rows` contiguous elements each of stat_dtype.
  void* mean = nullptr;
  void* rstd = nullptr;
  DType stat_dtype = DType::kFloat32;
};

// Threads split the rows.
void row_norm(const RowNormParams& p, const ParallelFor& parallel_for = serial_for);

}  // namespace neuronkernels
