// The boxed fallback: runs any ATen op that has no neuron registration with
// ATen's CPU kernel on the device buffers (zero-copy), queued on the device
// stream when the output shapes can be inferred up front (Meta kernels),
// after a stream sync otherwise, and with a copy to CPU and back only as the
// last resort.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torchneuron {

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs `op` through the fallback from an unboxed kernel (for the general
// cases of direct kernels, and for ops routed to another ATen op). Returns
// the stack of results.
template <typename... Args>
torch::jit::Stack call_fallback(const c10::OperatorHandle& op, Args&&... args) {
  torch::jit::Stack stack;
  stack.reserve(sizeof...(Args));
  (stack.emplace_back(std::forward<Args>(args)), ...);
  neuron_fallback(op, &stack);
  return stack;
}

// Routes the functional and in-place variants of structured ops (which
// would otherwise go through CompositeExplicitAutogradNonFunctional) to the
// fallback directly. Called once when the extension loads.
void register_structured_overrides();


}  // namespace torchneuron
