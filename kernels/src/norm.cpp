// Argument checks and the choice of instruction set for the row norms.
#include <string>

#include "neuronkernels/isa.hpp"
#include "rows_impl.hpp"

namespace neuronkernels {

void row_norm(const RowNormParams& p, const ParallelFor& pf) {
  auto fail = [](const std::string& what) { throw KernelError("row_norm: " + what); };
  if (p.rows < 0 || p.cols < 0) fail("negative sizes");
  if (p.rows == 0) return;
  if (!p.x.data || !p.y.data) fail("x and y need data");
  if (p.rows > 1 && (p.x.stride < p.cols || p.y.stride < p.cols)) {
    fail("row strides (x " + std::to_string(p.x.stride) + ", y " + std::to_string(p.y.stride) +
         ") below the " + std::to_string(p.cols) + " columns");
  }
  if (!(p.eps >= 0.0f)) fail("eps must be >= 0");
  switch (isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return isa_avx512::row_norm(p, pf);
    case Isa::kAvx2: return isa_avx2::row_norm(p, pf);
    case Isa::kBaseline: return isa_baseline::row_norm(p, pf);
  }
}

}  // namespace neuronkernels
