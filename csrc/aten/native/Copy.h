// Copies between host and device and between cores, and reading a scalar.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
at::Scalar _local_scalar_dense(const at::Tensor& self);

}  // namespace torchneuron::native
