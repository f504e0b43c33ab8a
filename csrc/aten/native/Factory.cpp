#include "csrc/aten/native/Factory.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/strides.h>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/OpStats.h"
#include "csrc/runtime/NeuronAllocator.h"
#include "csrc/runtime/NeuronDtypes.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronHooks.h"

namespace torchneuron::native {
namespace {

c10::DeviceIndex target_device(std::optional<c10::Device> device, const char* op) {
  c10::DeviceIndex index =
      device && device->has_index() ? device->index() : current_device();
  check_device_index(index, op);
  return index;
}

void check_layout(std::optional<c10::Layout> layout, const char* op) {
  TORCH_CHECK_NOT_IMPLEMENTED(!layout || *layout == c10::Layout::Strided, "[neuron] ", op,
                              ": only strided tensors are supported on neuron, got layout ",
                              *layout);
}

void check_not_pinned(std::optional<bool> pin_memory, const char* op) {
  TORCH_CHECK(!pin_memory.value_or(false), "[neuron] ", op,
              ": only dense CPU tensors can be pinned; pin_memory=True makes no sense for a "
              "neuron tensor");
}

}  // namespace

at::Tensor empty_dense(c10::DeviceIndex device, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       caffe2::TypeMeta dtype) {
  const size_t nbytes = static_cast<size_t>(c10::multiply_integers(sizes)) * dtype.itemsize();
  return tensor_over(device_storage(device, nbytes), c10::DispatchKey::PrivateUse1, dtype, sizes,
                     strides);
}

void check_dtype(c10::ScalarType dtype, const char* op) {
  TORCH_CHECK_TYPE(is_supported_dtype(dtype), "[neuron] ", op, ": dtype ", dtype,
                   " is not supported on neuron. Supported: ", supported_dtype_names(), ".");
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  auto index = target_device(device, "empty_strided");
  check_not_pinned(pin_memory, "empty_strided");
  check_layout(layout, "empty_strided");
  auto st = c10::dtype_or_default(dtype);
  check_dtype(st, "empty_strided");
  c10::DeviceGuard guard(make_device(index));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device, std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  auto index = target_device(device, "empty");
  check_not_pinned(pin_memory, "empty");
  check_layout(layout, "empty");
  auto st = c10::dtype_or_default(dtype);
  check_dtype(st, "empty");
  c10::DeviceGuard guard(make_device(index));
  return at::detail::empty_generic(size, device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st,
                                   memory_format);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (auto s : sizes) {
    TORCH_CHECK_VALUE(s >= 0, "[neuron] resize_: sizes must be non-negative, got ", sizes);
  }
  impl->set_sizes_contiguous(sizes);
  size_t needed = at::detail::computeStorageNbytesContiguous(sizes, self.dtype().itemsize(),
                                                            self.storage_offset());
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
  }
  if (memory_format) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "[neuron] resize_: unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  static OpCounter& counter = op_counter("aten::resize_");
  counter.count(ExecPath::kKernel);
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, c10::Storage source,
                                      c10::SymInt storage_offset, c10::SymIntArrayRef size,
                                      c10::SymIntArrayRef stride) {
  TORCH_CHECK(source.device().type() == c10::DeviceType::PrivateUse1,
              "[neuron] set_: expected a neuron storage, got one on ", source.device());
  auto offset = storage_offset.expect_int();
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  // No stride means contiguous, as on CPU (tensor.set_(storage, offset, size)).
  c10::DimVector contiguous;
  if (stride.empty() && !size.empty()) contiguous = c10::contiguous_strides(sizes);
  auto strides = stride.empty() ? c10::IntArrayRef(contiguous) : C10_AS_INTARRAYREF_SLOW(stride);
  TORCH_CHECK(sizes.size() == strides.size(), "[neuron] set_: got ", sizes.size(),
              " sizes ", sizes, " but ", strides.size(), " strides ", strides);
  TORCH_CHECK(offset >= 0, "[neuron] set_: storage_offset must be non-negative, got ", offset);
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(sizes, strides, offset);
  size_t needed = at::detail::computeStorageNbytes(sizes, strides, self.dtype().itemsize(), offset);
  if (needed > self.storage().nbytes()) {
    resize_storage_bytes(self.storage().unsafeGetStorageImpl(), needed);
  }
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  std::vector<c10::SymInt> size{c10::SymInt(n)}, stride{c10::SymInt(1)};
  return set_source_storage_offset(self, std::move(source), 0, size, stride);
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_source_storage_offset(self, source.storage(), source.sym_storage_offset(),
                                   source.sym_sizes(), source.sym_strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  std::vector<c10::SymInt> size{c10::SymInt(0)}, stride{c10::SymInt(1)};
  return set_source_storage_offset(self, device_storage(self.device().index(), 0), 0, size,
                                   stride);
}

}  // namespace torchneuron::native
