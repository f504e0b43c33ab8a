// Convolutions: PyTorch sends convolutions on an out-of-tree device to the
// "overrideable" ops; they run as aten::convolution and
// aten::convolution_backward through the fallback (ATen's CPU convolution on
// the device buffers).
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups);

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask);

}  // namespace torchneuron::native
