#include "csrc/aten/native/Views.h"

#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>

// ATen's view implementations only touch TensorImpl metadata, so they are
// device-independent and serve neuron tensors as they are.
namespace torchneuron::native {

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> offset;
  if (storage_offset) offset = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), offset);
}

at::Tensor _reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                          c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }

at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

}  // namespace torchneuron::native
