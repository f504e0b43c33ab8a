// Direct kernels for elementwise selection: where(condition, self, other)
// and masked_fill_(mask, value). ATen's CPU kernels for them are scalar
// loops (where took 13 times as long as add over [510, 32000]); selection
// only copies elements, so one loop per element size serves every dtype.
// Operands that broadcast or are 0-dim are read through zero strides.
// Promotion between self and other, non-contiguous full-size operands and
// complex types go to the boxed fallback, which handles everything.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other);
at::Tensor& masked_fill_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value);

}  // namespace torchneuron::native
