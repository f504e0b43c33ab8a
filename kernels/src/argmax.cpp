// Argument checks and the choice of instruction set for argmax over rows.
#include <string>

#include "neuronkernels/isa.hpp"
#include "rows_impl.hpp"

namespace neuronkernels {

void argmax_rows(const ArgmaxParams& p, const ParallelFor& pf) {
  if (p.rows < 0 || p.cols < 0) throw KernelError("argmax: negative sizes");
  if (p.rows > 0 && p.cols == 0) throw KernelError("argmax: rows of no elements have no maximum");
  if (p.rows > 1 && p.row_stride < p.cols) {
    throw KernelError("argmax: rows overlap (row stride " + std::to_string(p.row_stride) + " < " +
                      std::to_string(p.cols) + " columns)");
  }
  if (p.rows == 0) return;
  switch (isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return isa_avx512::argmax_rows(p, pf);
    case Isa::kAvx2: return isa_avx2::argmax_rows(p, pf);
    case Isa::kBaseline: return isa_baseline::argmax_rows(p, pf);
  }
}

}  // namespace neuronkernels
