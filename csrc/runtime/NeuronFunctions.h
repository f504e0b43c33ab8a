// Device topology and the calling thread's current device.
#pragma once

#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "neuronrt/neuronrt.h"

namespace torchneuron {

// Visible cores; 0 when the runtime configuration or TORCHNEURON_ISA is
// invalid. Never throws.
c10::DeviceIndex device_count() noexcept;
// Why device_count() is 0: the runtime's or the kernels' configuration error.
std::string device_unavailable_reason();
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex device);
// Raises a clear error for an index outside [0, device_count()).
void check_device_index(c10::DeviceIndex device, const char* op);
inline c10::Device make_device(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

// The runtime's properties of core `device` (index checked).
nrtDeviceProp device_properties(c10::DeviceIndex device);
// Waits for every stream of `device` (the current device if negative) and
// raises their first errors; the wait goes through blocking_wait
// (csrc/runtime/BlockingWait.h).
void synchronize_device(c10::DeviceIndex device);
// NEURON_LAUNCH_BLOCKING=1: every launch waits for its work.
bool launch_blocking();

// This process is a child forked after its parent used the device.
bool in_bad_fork();
// Raises the runtime's fork error in such a child (torch.neuron.init(), as
// torch.cuda.init() does).
void check_not_forked();

// The instruction-set level the device's kernels run at, "" when
// TORCHNEURON_ISA names one they cannot use (device_unavailable_reason()
// says why); the levels this CPU runs, lowest first.
std::string kernel_isa_name();
std::vector<std::string> supported_kernel_isa_names();

}  // namespace torchneuron
