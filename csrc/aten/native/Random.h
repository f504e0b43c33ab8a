// Random ops whose CPU kernels would draw from the CPU generator: neuron
// versions built on ops that take the device generator.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train);

}  // namespace torchneuron::native
