// The dtypes a neuron tensor can hold: what allocation accepts and what
// torch.accelerator.get_device_capability() reports.
#pragma once

#include <c10/core/DeviceCapability.h>
#include <c10/core/ScalarType.h>

namespace torchneuron {

bool is_supported_dtype(c10::ScalarType dtype);

// "float32, bfloat16, ..." for error messages.
const char* supported_dtype_names();

c10::DeviceCapability device_capability();

}  // namespace torchneuron
