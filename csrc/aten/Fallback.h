// The boxed fallback: runs any ATen op that has no neuron registration with
// ATen's CPU kernel on the device buffers (zero-copy), queued on the device
// stream when the output shapes can be inferred up front (Meta kernels),
// after a stream sync otherwise, and with a copy to CPU and back only as the
// last resort.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torchneuron {

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Routes the functional and in-place variants of structured ops (which
// would otherwise go through CompositeExplicitAutogradNonFunctional) to the
// fallback directly. Called once when the extension loads.
void register_structured_overrides();


}  // namespace torchneuron
