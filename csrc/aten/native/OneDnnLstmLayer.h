// One LSTM layer and direction through oneDNN's LSTM primitive (ATen's
// mkldnn_rnn_layer and its backward), the kernel PyTorch's CPU LSTM runs.
// Used by RecurrentLayers.cpp for the cases CPU itself sends to oneDNN
// (float32, and bfloat16 where oneDNN has it; no projection) with every
// sequence of the batch as long as the others: there the whole recurrence,
// forward and backward, is one oneDNN primitive per layer on the worker's
// OpenMP team, as fast as CPU eager and with CPU's results.
#pragma once

#include <optional>
#include <tuple>

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

// Whether oneDNN takes an LSTM layer of this dtype (PyTorch's CPU rule:
// oneDNN enabled; float32, or bfloat16 where oneDNN supports it) without a
// projection.
bool onednn_lstm_applies(c10::ScalarType dtype, bool has_projection);

// The layer over x [T * B, I] (T steps of B rows) from states h0, c0 [B, H]:
// returns y [T * B, H], hy, cy [B, H]; differentiable (one autograd node).
std::tuple<at::Tensor, at::Tensor, at::Tensor> onednn_lstm_layer(
    const at::Tensor& x, int64_t steps, const at::Tensor& h0, const at::Tensor& c0,
    const at::Tensor& w_ih, const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih,
    const std::optional<at::Tensor>& b_hh, bool reverse, bool train);

}  // namespace torchneuron::native
