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

// The embedding's weight gradient, made in a device buffer by index_add_:
// ATen's CPU kernel zero-fills a fresh host buffer of the whole weight's size
// every call (a page fault per 4 KiB of a 100 MB vocabulary gradient) before
// the result is copied to the device. float32 and float64 only (bit for bit
// ATen's result); other cases run ATen's kernel.
at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq);

// Whether embedding_backward_into gives ATen's bits for this case.
bool embedding_backward_by_index_add(c10::ScalarType grad_dtype, bool scale_grad_by_freq);

// The embedding's weight gradient written into `grad_weight` (rows x dim, any
// device: a compiled program passes CPU views of its planned buffers).
void embedding_backward_into(const at::Tensor& grad_weight, const at::Tensor& grad_output,
                             const at::Tensor& indices, int64_t padding_idx);

}  // namespace torchneuron::native
