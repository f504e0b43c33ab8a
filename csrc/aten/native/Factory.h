// Allocation and storage-level ops: empty, empty_strided, resize_, set_.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

// A tensor on neuron:`device` with these sizes and strides, made without a
// trip through the dispatcher (for direct kernels on their hot path; the
// caller has checked the dtype and that the strides are dense).
at::Tensor empty_dense(c10::DeviceIndex device, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       caffe2::TypeMeta dtype);

// Rejects dtypes the device does not support, naming the op.
void check_dtype(c10::ScalarType dtype, const char* op);

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory);
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source,
                                      c10::SymInt storage_offset, c10::SymIntArrayRef size,
                                      c10::SymIntArrayRef stride);
at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);

}  // namespace torchneuron::native
