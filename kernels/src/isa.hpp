// The instruction set the kernels' bodies run with, detected once: each
// *_impl.cpp is compiled once per instruction set into its own namespace
// (isa_avx512, isa_avx2, isa_baseline) and the dispatchers pick one.
#pragma once

namespace neuronkernels {

enum class Isa { kBaseline, kAvx2, kAvx512 };

Isa isa();

// AVX512_BF16 (bfloat16 dot products) on top of kAvx512.
bool has_avx512_bf16();

}  // namespace neuronkernels
