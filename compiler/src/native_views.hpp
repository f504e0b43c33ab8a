// How native steps and the pattern pass see a value's layout as the kernels'
// views: element types, 4-D views broadcast to an iteration shape, and a
// value as rows of its last dimension.
#pragma once

#include <optional>
#include <vector>

#include "neuronkernels/types.hpp"
#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

// The kernels' type for a floating dtype they take (float32, bfloat16, float16).
std::optional<neuronkernels::DType> kernel_dtype(DType t);

// `layout` broadcast to `sizes` (right-aligned, at most 4 dimensions, padded
// in front with size-1 dimensions) as a 4-D view at `data`.
neuronkernels::View4 native_view4(const Layout& layout, void* data, const std::vector<int64_t>& sizes);

// A value as `rows` rows of `cols` contiguous elements, `stride` apart:
// nothing if its leading dimensions do not collapse into one row stride or
// its last dimension is not contiguous.
struct RowsShape {
  int64_t rows = 0, cols = 0, stride = 0;
};
std::optional<RowsShape> as_rows(const Layout& layout);
// as_rows for a layout the pattern pass already accepted.
RowsShape rows_shape(const Layout& layout);

}  // namespace neuroncompiler
