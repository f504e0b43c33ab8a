// Direct kernels for the hottest elementwise ops. When both operands are
// neuron tensors of one floating dtype and one dense layout, the output
// layout is the inputs' and needs no inference; anything else goes to the
// boxed fallback, which handles broadcasting, promotion and scalars.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor mul(const at::Tensor& self, const at::Tensor& other);
at::Tensor div(const at::Tensor& self, const at::Tensor& other);
at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha);
at::Tensor& mul_(at::Tensor& self, const at::Tensor& other);

}  // namespace torchneuron::native
