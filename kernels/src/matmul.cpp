// Argument checks and the choice of instruction set for the skinny matmul.
#include <string>

#include "neuronkernels/isa.hpp"
#include "matmul_impl.hpp"

namespace neuronkernels {
namespace {

std::string why_unsupported(const SkinnyMatmulParams& p) {
  const View2 &x = p.x, &w = p.w, &y = p.y, &b = p.bias;
  if (!x.data && x.rows * x.cols > 0) return "x has no data";
  if (w.dtype != x.dtype || y.dtype != x.dtype || (b.data && b.dtype != x.dtype)) {
    return "x, w, y and bias must have one dtype";
  }
  if (x.cols != w.rows) {
    return "x has " + std::to_string(x.cols) + " columns but w has " + std::to_string(w.rows) +
           " rows";
  }
  if (y.rows != x.rows || y.cols != w.cols) return "y must be [x.rows, w.cols]";
  if (b.data && (b.rows != y.rows || b.cols != y.cols)) return "bias must be viewed as y's shape";
  if (x.col_stride != 1 && x.cols > 1) return "x must be contiguous along its rows";
  if (y.col_stride != 1 && y.cols > 1) return "y must be contiguous along its rows";
  if (w.row_stride != 1 && w.col_stride != 1) return "w must be contiguous along rows or columns";
  return "";
}

}  // namespace

bool skinny_matmul_supports(const SkinnyMatmulParams& p) { return why_unsupported(p).empty(); }

void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& parallel_for) {
  const std::string why = why_unsupported(p);
  if (!why.empty()) throw KernelError("skinny_matmul: " + why);
  switch (isa()) {
    case Isa::kAvx512Bf16: return isa_avx512_bf16::skinny_matmul(p, parallel_for);
    case Isa::kAvx512: return isa_avx512::skinny_matmul(p, parallel_for);
    case Isa::kAvx2: return isa_avx2::skinny_matmul(p, parallel_for);
    case Isa::kBaseline: return isa_baseline::skinny_matmul(p, parallel_for);
  }
}

}  // namespace neuronkernels
