// Tensors built by hand, without the dispatcher: the one place that makes
// TensorImpls (neuron tensors over device storages, CPU aliases and Meta
// stand-ins of them) and device storages, and the predicates that tell a
// neuron tensor.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

namespace torchneuron {

// A tensor that may be undefined (an optional argument, an entry of a boxed
// stack) is a defined neuron tensor.
inline bool defined_on_neuron(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// A defined tensor is on neuron (an undefined one has no device: error).
inline bool on_neuron(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// A fresh, resizable storage of `nbytes` from the device allocator of
// neuron:`device`.
c10::Storage device_storage(c10::DeviceIndex device, size_t nbytes);

// A tensor of `key`'s backend (PrivateUse1, CPU, Meta) over `storage` with
// this metadata.
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, caffe2::TypeMeta dtype,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t storage_offset = 0,
                       bool conj = false, bool neg = false);

// A tensor of `key`'s backend over `storage` with the metadata of `like`
// (sizes, strides, storage offset, dtype, conj/neg bits).
at::Tensor tensor_like(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like);

// A neuron tensor viewing `storage` (a neuron storage) with the metadata of
// `like`.
inline at::Tensor neuron_view_like(c10::Storage storage, const at::Tensor& like) {
  return tensor_like(std::move(storage), c10::DispatchKey::PrivateUse1, like);
}

}  // namespace torchneuron
