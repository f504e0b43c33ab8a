// Tensor.record_stream: keeps a tensor's memory from being reused by other
// streams until the work queued on `stream` so far has run.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

namespace torchneuron::native {

void record_stream(at::Tensor& self, c10::Stream stream);

}  // namespace torchneuron::native
