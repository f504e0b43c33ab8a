// Device topology and the calling thread's current device.
#pragma once

#include <string>

#include <c10/core/Device.h>

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

}  // namespace torchneuron
