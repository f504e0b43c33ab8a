#include "csrc/aten/DeviceTensors.h"

#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include "csrc/runtime/NeuronAllocator.h"

namespace torchneuron {

c10::Storage device_storage(c10::DeviceIndex device, size_t nbytes) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes, allocate_on(device, nbytes), device_allocator(),
      /*resizable=*/true));
}

at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, caffe2::TypeMeta dtype,
                       c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t storage_offset,
                       bool conj, bool neg) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                   dtype);
  impl->set_sizes_and_strides(sizes, strides, storage_offset);
  if (conj) impl->_set_conj(true);
  if (neg) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

at::Tensor tensor_like(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  return tensor_over(std::move(storage), key, like.dtype(), like.sizes(), like.strides(),
                     like.storage_offset(), like.is_conj(), like.is_neg());
}

}  // namespace torchneuron
