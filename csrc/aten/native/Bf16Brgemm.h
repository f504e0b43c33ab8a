// Matrix products of bfloat16 operands accumulated in float32 through
// oneDNN's bfloat16 microkernel, on CPUs with AVX512-BF16 where MKL's
// bfloat16 GEMM does not run its fast code (MKL picks its code by CPU
// vendor: on an AMD EPYC Zen 5 it ran at 200 GFLOP/s, this path at 850).
//
// ATen exports no full GEMM for these types on x86 (its oneDNN matmul takes
// one dtype for operands and result; cpublas::gemm is not exported), but it
// exports oneDNN's batch-reduce microkernel (at::native::cpublas::brgemm,
// which Inductor's generated GEMMs call too). This file blocks a product
// into that kernel's tiles over the device's threads; the arithmetic is
// oneDNN's.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

// Whether bf16_brgemm runs on this CPU now: the kernels' ISA level is
// avx512_bf16 (TORCHNEURON_ISA may lower it), ATen's oneDNN is enabled
// (torch.backends.mkldnn), and the microkernel passed a self-test on first
// use (a torch build without it fails that test, never a product).
bool bf16_brgemm_available();

// Y (+)= A @ B on CPU tensors (aliases of device buffers, inside queued
// work): A [M, K] and B [K, N] bfloat16 in any strides, Y [M, N] float32
// with unit column stride and rows that do not overlap. `accumulate` adds
// the product to Y's values; otherwise Y is overwritten. Only after
// bf16_brgemm_available() said yes.
void bf16_brgemm(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, bool accumulate);

}  // namespace torchneuron::native
