// mm, addmm, bmm and baddbmm with an out_dtype
// (`torch.mm(a, b, out_dtype=torch.float32)`): CUDA's products of bfloat16 or
// float16 operands accumulated and returned in float32, or of any dtype into
// its own. ATen has no CPU kernel for these overloads, so the boxed fallback
// cannot run them. Here 2-D bfloat16 operands with a float32 result run the
// mixed-precision GEMM where the CPU has one (UpcastGemm.h); otherwise the
// 16-bit operands are cast to float32 on the device and multiplied by the
// device's float32 products. The product of two 16-bit values is exact in
// float32, so either computes what CUDA's kernels compute, up to the order of
// the sums. Checks and messages follow CUDA's.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor mm_dtype(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype);
at::Tensor& mm_dtype_out(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype, at::Tensor& out);
at::Tensor addmm_dtype(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                       at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha);
at::Tensor& addmm_dtype_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                            at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha,
                            at::Tensor& out);
at::Tensor bmm_dtype(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype);
at::Tensor& bmm_dtype_out(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype, at::Tensor& out);
at::Tensor baddbmm_dtype(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                         at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha);
at::Tensor& baddbmm_dtype_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                              at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha,
                              at::Tensor& out);

}  // namespace torchneuron::native
