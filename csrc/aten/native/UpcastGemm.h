// Matrix products of bfloat16 operands accumulated in float32 (ATen's
// mm.dtype / addmm.dtype with out_dtype float32): what a compiled graph runs
// for mm / addmm of bfloat16 tensors cast to float32 (the compiler's pattern
// pass, compiler/include/neuroncompiler/patterns.hpp).
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

// Y = beta * C + alpha * (A @ B) on CPU tensors (aliases of device buffers):
// A [M, K] and B [K, N] bfloat16, Y [M, N] float32 with unit column stride, C
// (optional; may be Y itself) float32 broadcasting to Y. A bfloat16 GEMM with
// float32 accumulation reads the operands as they are: on Intel CPUs at
// avx512_bf16 (AVX512-BF16 or AMX), MKL's (cblas_gemm_bf16bf16f32, exported
// by libtorch_cpu); on other CPUs at avx512_bf16, oneDNN's microkernel blocked
// over the device's threads (Bf16Brgemm.h; alpha 1). Elsewhere the operands
// are cast to float32 and multiplied as the device's float32 products are
// (OneDnnGemm.h), as the graph wrote it.
// A product of two bfloat16 values is exact in float32, so all compute the
// same sums up to their order.
void upcast_addmm_here(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, const at::Tensor* C,
                       float beta, float alpha);

// Whether upcast_addmm_here takes MKL's bfloat16 GEMM on this CPU.
bool upcast_gemm_uses_mkl();

// Whether upcast_addmm_here runs a bfloat16 GEMM (MKL's or oneDNN's
// microkernel) rather than casting its operands: what a compiled graph's
// pattern pass asks before it turns products of upcast operands into one.
bool upcast_gemm_is_mixed_precision();

}  // namespace torchneuron::native
