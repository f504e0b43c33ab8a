// argmax over the last dimension of a contiguous float32, bfloat16 or
// float16 tensor through the device's kernel (kernels/include/neuronkernels/
// argmax.hpp): greedy decoding's choice of the next token from each row of
// logits, every step. ATen's CPU reduction walks the elements one at a time
// (0.5 ns an element in float32, 3 ns in bfloat16: 0.65 ms a step for a batch
// of 8 rows over a 152K vocabulary). Other cases (another dimension,
// dim=None, other dtypes, strides, empty rows) go to the boxed fallback.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim);

}  // namespace torchneuron::native
