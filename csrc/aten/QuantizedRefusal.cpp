// Quantized tensors on neuron: every op that reaches the QuantizedPrivateUse1
// key (torch.empty(dtype=torch.qint8), q.to("neuron"), ...) raises one clear
// error instead of the dispatcher's "Could not run ... 'Quantizedneuron'".
// Quantized kernels are CPU/CUDA-specific (fbgemm, qnnpack) and the device
// stores no quantized dtype (csrc/runtime/NeuronDtypes.cpp).
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "csrc/runtime/NeuronDtypes.h"

namespace torchneuron {
namespace {

void refuse_quantized(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_TYPE(false, "[neuron] ", op.schema().operator_name(),
                   ": quantized tensors are not supported on neuron. Supported dtypes: ",
                   supported_dtype_names(),
                   ". Dequantize on the CPU first (tensor.dequantize()) and move the result.");
}

}  // namespace

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
}

}  // namespace torchneuron
