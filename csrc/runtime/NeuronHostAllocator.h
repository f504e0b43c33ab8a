// Pinned host memory (tensor.pin_memory(), DataLoader(pin_memory=True)):
// page-locked in spirit; host-to-device copies from it may run asynchronously.
#pragma once

#include <ATen/core/CachingHostAllocator.h>

namespace torchneuron {

at::HostAllocator* host_allocator();
bool is_pinned_ptr(const void* ptr);

}  // namespace torchneuron
