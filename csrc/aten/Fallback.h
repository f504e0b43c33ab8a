// The boxed fallback: runs any ATen op that has no neuron registration with
// ATen's CPU kernel on the device buffers (zero-copy), queued on the device
// stream when the output shapes can be inferred up front (Meta kernels),
// after a stream sync otherwise, and with a copy to CPU and back only as the
// last resort.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torchneuron {

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Ops forced onto the copy-to-CPU path by TORCHNEURON_CPU_FALLBACK_OPS (a
// comma-separated list of "aten::name.overload"), e.g. to bisect a problem.
bool uses_cpu_copy(const std::string& op_name);

}  // namespace torchneuron
