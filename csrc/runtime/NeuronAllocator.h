// The device allocator PyTorch sees (c10::DeviceAllocator), over the
// runtime's caching allocator. Every byte of a neuron tensor comes from here.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>

namespace torchneuron {

c10::DeviceAllocator* device_allocator();
// Allocates on `device`, ordered on its current stream.
c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);

}  // namespace torchneuron
