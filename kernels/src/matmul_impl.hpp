// The skinny matmul's body, compiled once per instruction set (see neuronkernels/isa.hpp);
// matmul.cpp checks arguments and picks one.
#pragma once

#include "neuronkernels/matmul.hpp"

namespace neuronkernels {

namespace isa_avx512_bf16 { void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& pf); }
namespace isa_avx512 { void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& pf); }
namespace isa_avx2 { void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& pf); }
namespace isa_baseline { void skinny_matmul(const SkinnyMatmulParams& p, const ParallelFor& pf); }

}  // namespace neuronkernels
