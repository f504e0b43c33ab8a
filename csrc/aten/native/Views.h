// View ops: metadata only, no device work.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size);
at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset);
at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride);
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step);
at::Tensor view_as_real(const at::Tensor& self);
at::Tensor view_as_complex(const at::Tensor& self);

}  // namespace torchneuron::native
