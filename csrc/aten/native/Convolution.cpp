#include "csrc/aten/native/Convolution.h"

#include "csrc/aten/Fallback.h"

namespace torchneuron::native {

at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding,
                                    c10::IntArrayRef dilation, bool transposed,
                                    c10::IntArrayRef output_padding, int64_t groups) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  auto out = call_fallback(op, input, weight, bias, stride.vec(), padding.vec(), dilation.vec(),
                           transposed, output_padding.vec(), groups);
  return out[0].toTensor();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
    bool transposed, c10::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  // The bias gradient's size: the output channels.
  int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  std::vector<int64_t> bias_sizes{out_channels};
  c10::List<bool> mask;
  for (bool m : output_mask) mask.push_back(m);
  auto out = call_fallback(op, grad_output, input, weight, bias_sizes, stride.vec(),
                           padding.vec(), dilation.vec(), transposed, output_padding.vec(),
                           groups, std::move(mask));
  return {out[0].toTensor(), out[1].toTensor(), out[2].toTensor()};
}

}  // namespace torchneuron::native
