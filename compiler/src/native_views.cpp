#include "native_views.hpp"

#include "neuroncompiler/tile_lowering.hpp"

namespace neuroncompiler {

namespace nk = neuronkernels;

std::optional<nk::DType> kernel_dtype(DType t) {
  switch (t) {
    case DType::kFloat32: return nk::DType::kFloat32;
    case DType::kBFloat16: return nk::DType::kBFloat16;
    case DType::kFloat16: return nk::DType::kFloat16;
    default: return std::nullopt;
  }
}

nk::View4 native_view4(const Layout& layout, void* data, const std::vector<int64_t>& sizes) {
  nk::View4 v;
  v.data = data;
  v.dtype = kernel_dtype(layout.dtype).value_or(nk::DType::kFloat32);
  const std::vector<int64_t> strides = broadcast_strides(layout, sizes);
  const size_t pad = 4 - sizes.size();
  for (size_t d = 0; d < 4; ++d) {
    v.sizes[d] = d < pad ? 1 : sizes[d - pad];
    v.strides[d] = d < pad ? 0 : strides[d - pad];
  }
  return v;
}

std::optional<RowsShape> as_rows(const Layout& l) {
  RowsShape r;
  if (l.sizes.empty()) return RowsShape{1, 1, 1};
  r.cols = l.sizes.back();
  if (r.cols > 1 && l.strides.back() != 1) return std::nullopt;
  r.rows = 1;
  r.stride = r.cols;
  // Leading dimensions, innermost first: each must step over the previous ones.
  int64_t expected = -1;  // the stride the next outer dimension needs (-1: any)
  for (size_t d = l.sizes.size() - 1; d-- > 0;) {
    if (l.sizes[d] == 1) continue;
    if (expected < 0) {
      r.stride = l.strides[d];
      if (r.stride < r.cols) return std::nullopt;
    } else if (l.strides[d] != expected) {
      return std::nullopt;
    }
    r.rows *= l.sizes[d];
    expected = l.strides[d] * l.sizes[d];
  }
  return r;
}

RowsShape rows_shape(const Layout& l) { return as_rows(l).value_or(RowsShape{}); }

}  // namespace neuroncompiler
