// Argument checks and the choice of instruction set for the rotary embedding.
#include <string>

#include "neuronkernels/isa.hpp"
#include "rows_impl.hpp"

namespace neuronkernels {

void rope(const RopeParams& p, const ParallelFor& pf) {
  auto fail = [](const std::string& what) { throw KernelError("rope: " + what); };
  for (int d = 0; d < 4; ++d) {
    if (p.x.sizes[d] < 0) fail("negative sizes");
    for (const View4* v : {&p.cos, &p.sin, &p.out}) {
      if (v->sizes[d] != p.x.sizes[d]) fail("cos, sin and out must be viewed with x's sizes");
    }
  }
  if (p.x.sizes[3] % 2 != 0) fail("the last dimension (" + std::to_string(p.x.sizes[3]) + ") must be even");
  for (const View4* v : {&p.x, &p.cos, &p.sin, &p.out}) {
    if (v->sizes[3] > 1 && v->strides[3] != 1) fail("every operand needs stride 1 along the last dimension");
  }
  if (p.x.sizes[0] * p.x.sizes[1] * p.x.sizes[2] * p.x.sizes[3] == 0) return;
  switch (isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return isa_avx512::rope(p, pf);
    case Isa::kAvx2: return isa_avx2::rope(p, pf);
    case Isa::kBaseline: return isa_baseline::rope(p, pf);
  }
}

}  // namespace neuronkernels
