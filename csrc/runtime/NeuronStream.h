// PyTorch streams (c10::Stream) on neuron: ids map to runtime streams, and
// each thread has a current stream per device (the default stream, id 0,
// until set).
#pragma once

#include <c10/core/Stream.h>

#include "neuronrt/neuronrt.h"

namespace torchneuron {

// The runtime stream behind a c10::Stream of type PrivateUse1.
nrtStream_t stream_handle(const c10::Stream& stream);
c10::Stream current_stream(c10::DeviceIndex device);
// Hot path: the runtime handle of the current stream of `device`.
nrtStream_t current_stream_handle(c10::DeviceIndex device);
void set_current_stream(const c10::Stream& stream);
c10::Stream default_stream(c10::DeviceIndex device);
// Streams come from a fixed pool per device (round robin), like CUDA's, so
// that creating many torch Streams does not create many worker threads.
c10::Stream stream_from_pool(c10::DeviceIndex device, int priority);

}  // namespace torchneuron
