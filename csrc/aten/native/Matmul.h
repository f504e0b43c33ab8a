// Matrix products with few rows (a decode step's linear layers) run the
// device's skinny-matmul kernel (neuronkernels/matmul.hpp), which streams the
// weights once at memory speed; every other mm/addmm goes on to the boxed
// fallback (ATen's CPU GEMM on the device buffers), as do errors, so their
// messages are ATen's.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha);

}  // namespace torchneuron::native
