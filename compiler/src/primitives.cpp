#include "primitives.hpp"

#include "neuronkernels/isa.hpp"

namespace neuroncompiler {
namespace isa_baseline { extern const detail::Primitives kPrimitives; }
#ifdef NC_HAVE_X86_VARIANTS
namespace isa_avx2 { extern const detail::Primitives kPrimitives; }
namespace isa_avx512 { extern const detail::Primitives kPrimitives; }
#endif

namespace detail {

const Primitives& primitives() {
  static const Primitives* const chosen = [] {
#ifdef NC_HAVE_X86_VARIANTS
    switch (neuronkernels::isa()) {
      case neuronkernels::Isa::kAvx512:
      case neuronkernels::Isa::kAvx512Bf16: return &isa_avx512::kPrimitives;
      case neuronkernels::Isa::kAvx2: return &isa_avx2::kPrimitives;
      case neuronkernels::Isa::kBaseline: break;
    }
#endif
    return &isa_baseline::kPrimitives;
  }();
  return *chosen;
}

}  // namespace detail
}  // namespace neuroncompiler
