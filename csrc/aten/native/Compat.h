// Small ops where PyTorch's generic behaviour is wrong for neuron.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

// module.to("neuron") keeps parameter objects (and so tied weights) only if
// CPU and neuron tensors may be swapped in place (param.data = moved).
bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// Integer histc, as on CUDA (Transformers' MoE routing counts experts with
// it); ATen's CPU kernel only takes floating types.
at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                 const at::Scalar& max);

}  // namespace torchneuron::native
