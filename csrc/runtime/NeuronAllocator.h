// The device allocator PyTorch sees (c10::DeviceAllocator), over the
// runtime's caching allocator. Every byte of a neuron tensor comes from here.
#pragma once

#include <vector>

#include <c10/core/CachingDeviceAllocator.h>

#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

c10::DeviceAllocator* device_allocator();
// Allocates on `device`, ordered on its current stream.
c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);
// The caching allocator's segments on `device` (index checked), for
// torch.neuron.memory_snapshot().
std::vector<neuronrt::SegmentInfo> memory_snapshot(c10::DeviceIndex device);

}  // namespace torchneuron
