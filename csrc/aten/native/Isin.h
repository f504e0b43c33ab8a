// A direct kernel for isin(elements, test_elements) with a few test values
// (Transformers' stopping criteria and logits processors ask whether each
// token, or the whole vocabulary, is an end-of-sequence id every decoding
// step). Both operands of one dtype, contiguous, on one neuron device; other
// cases (promotion, many test values) go to the boxed fallback.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor isin(const at::Tensor& elements, const at::Tensor& test_elements, bool assume_unique, bool invert);

}  // namespace torchneuron::native
