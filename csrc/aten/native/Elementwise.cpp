#include "csrc/aten/native/Elementwise.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/runtime/NeuronAllocator.h"

namespace torchneuron::native {
namespace {

// Same device, dtype, sizes and strides, dense, floating: the output (or the
// in-place self) has exactly this layout, so nothing needs inferring.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  // Operands sharing memory go to the fallback, whose aliases share storage
  // so that ATen's overlap checks see the truth.
  return b.device() == a.device() && a.scalar_type() == b.scalar_type() &&
         !a.storage().is_alias_of(b.storage()) &&
         at::isFloatingType(a.scalar_type()) && a.sizes() == b.sizes() &&
         a.strides() == b.strides() && a.is_non_overlapping_and_dense() &&
         !a.is_conj() && !b.is_conj() && !a.is_neg() && !b.is_neg();
}

at::Tensor empty_like_dense(const at::Tensor& a) {
  auto device = a.device().index();
  c10::Storage storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), a.nbytes(), allocate_on(device, a.nbytes()),
      device_allocator(), /*resizable=*/true));
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), a.dtype());
  impl->set_sizes_and_strides(a.sizes(), a.strides());
  return at::Tensor(std::move(impl));
}

// The boxed fallback for the general case.
template <typename... Args>
c10::IValue via_fallback(const char* name, const char* overload, Args&&... args) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  return std::move(call_fallback(op, std::forward<Args>(args)...).back());
}

// Queues out_fn(out, a, b) on CPU aliases; counts it as a direct kernel.
template <typename F>
void queue_binary(const char* name, OpCounter& counter, const at::Tensor& out,
                  const at::Tensor& a, const at::Tensor& b, F out_fn) {
  launch(a.device().index(), name,
         [o = cpu_alias(out), x = cpu_alias(a), y = cpu_alias(b), out_fn]() mutable {
           at::AutoDispatchBelowADInplaceOrView below_autograd;
           out_fn(o, x, y);
         });
  counter.count(ExecPath::kKernel);
}

}  // namespace

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (!same_dense_layout(self, other)) {
    return via_fallback("aten::add", "Tensor", self, other, alpha).toTensor();
  }
  static OpCounter& counter = op_counter("aten::add.Tensor");
  at::Tensor out = empty_like_dense(self);
  queue_binary("aten::add.Tensor", counter, out, self, other,
               [alpha](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
                 at::add_out(o, x, y, alpha);
               });
  return out;
}

at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (!same_dense_layout(self, other)) {
    return via_fallback("aten::sub", "Tensor", self, other, alpha).toTensor();
  }
  static OpCounter& counter = op_counter("aten::sub.Tensor");
  at::Tensor out = empty_like_dense(self);
  queue_binary("aten::sub.Tensor", counter, out, self, other,
               [alpha](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
                 at::sub_out(o, x, y, alpha);
               });
  return out;
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  if (!same_dense_layout(self, other)) {
    return via_fallback("aten::mul", "Tensor", self, other).toTensor();
  }
  static OpCounter& counter = op_counter("aten::mul.Tensor");
  at::Tensor out = empty_like_dense(self);
  queue_binary("aten::mul.Tensor", counter, out, self, other,
               [](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) { at::mul_out(o, x, y); });
  return out;
}

at::Tensor div(const at::Tensor& self, const at::Tensor& other) {
  if (!same_dense_layout(self, other)) {
    return via_fallback("aten::div", "Tensor", self, other).toTensor();
  }
  static OpCounter& counter = op_counter("aten::div.Tensor");
  at::Tensor out = empty_like_dense(self);
  queue_binary("aten::div.Tensor", counter, out, self, other,
               [](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) { at::div_out(o, x, y); });
  return out;
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  if (!same_dense_layout(self, other)) {
    via_fallback("aten::add_", "Tensor", self, other, alpha);
    return self;
  }
  static OpCounter& counter = op_counter("aten::add_.Tensor");
  queue_binary("aten::add_.Tensor", counter, self, self, other,
               [alpha](at::Tensor& o, const at::Tensor&, const at::Tensor& y) { o.add_(y, alpha); });
  return self;
}

at::Tensor& mul_(at::Tensor& self, const at::Tensor& other) {
  if (!same_dense_layout(self, other)) {
    via_fallback("aten::mul_", "Tensor", self, other);
    return self;
  }
  static OpCounter& counter = op_counter("aten::mul_.Tensor");
  queue_binary("aten::mul_.Tensor", counter, self, self, other,
               [](at::Tensor& o, const at::Tensor&, const at::Tensor& y) { o.mul_(y); });
  return self;
}

}  // namespace torchneuron::native
