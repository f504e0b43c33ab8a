// nn.LSTM and nn.GRU on neuron, one layer and direction at a time as a single
// autograd node: the input projection of the whole sequence is one matrix
// product, the recurrence (per step: the hidden projection and the fused cell
// of kernels/) one queued task, and the backward the same in reverse, with
// the weight gradients as one product over all steps each. Registered for
// AutogradPrivateUse1, in place of PyTorch's per-step composite; arguments the
// fast path does not take (other dtypes, mixed devices, bad shapes) go to
// PyTorch's composite, which checks them and reports its usual errors.
// LSTM layers that CPU would run with oneDNN run oneDNN's primitive here too
// (OneDnnLstmLayer.h).
#pragma once

#include <tuple>

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_input(
    const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
    int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first);

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_data(
    const at::Tensor& data, const at::Tensor& batch_sizes, at::TensorList hx, at::TensorList params,
    bool has_biases, int64_t num_layers, double dropout, bool train, bool bidirectional);

std::tuple<at::Tensor, at::Tensor> gru_input(const at::Tensor& input, const at::Tensor& hx,
                                             at::TensorList params, bool has_biases,
                                             int64_t num_layers, double dropout, bool train,
                                             bool bidirectional, bool batch_first);

std::tuple<at::Tensor, at::Tensor> gru_data(const at::Tensor& data, const at::Tensor& batch_sizes,
                                            const at::Tensor& hx, at::TensorList params,
                                            bool has_biases, int64_t num_layers, double dropout,
                                            bool train, bool bidirectional);

}  // namespace torchneuron::native
