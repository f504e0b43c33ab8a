#include "csrc/aten/native/Elementwise.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/add.h>
#include <ATen/ops/div.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sub.h>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/Factory.h"

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
  return empty_dense(a.device().index(), a.sizes(), a.strides(), a.dtype());
}

// One direct binary op: its fallback (the general case) and its counter.
struct BinaryOp {
  BinaryOp(const char* name, const char* overload)
      : full_name(std::string(name) + "." + overload),
        handle(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload)),
        counter(op_counter(full_name)) {}

  // Functional form: a fresh output of the operands' layout.
  template <typename F, typename... Extra>
  at::Tensor functional(const at::Tensor& self, const at::Tensor& other, F out_fn,
                        const Extra&... extra) const {
    if (!same_dense_layout(self, other)) {
      return call_fallback(handle, self, other, extra...).back().toTensor();
    }
    at::Tensor out = empty_like_dense(self);
    queue(out, self, other, std::move(out_fn));
    return out;
  }

  // In-place form: self is the output.
  template <typename F, typename... Extra>
  at::Tensor& inplace(at::Tensor& self, const at::Tensor& other, F out_fn,
                      const Extra&... extra) const {
    if (!same_dense_layout(self, other)) {
      call_fallback(handle, self, other, extra...);
      return self;
    }
    queue(self, self, other, std::move(out_fn));
    return self;
  }

  // Queues out_fn(out, a, b) on CPU aliases taken now.
  template <typename F>
  void queue(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, F out_fn) const {
    launch_cpu_kernels(a.device().index(), full_name.c_str(), out.numel(), /*matrix=*/false,
           [o = queued_alias(out), x = queued_alias(a), y = queued_alias(b), out_fn]() mutable {
             at::AutoDispatchBelowADInplaceOrView below_autograd;
             out_fn(o, x, y);
           });
    counter.count(ExecPath::kKernel);
  }

  std::string full_name;
  c10::OperatorHandle handle;
  OpCounter& counter;
};

}  // namespace

at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  static const BinaryOp op("aten::add", "Tensor");
  return op.functional(
      self, other, [alpha](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
        at::add_out(o, x, y, alpha);
      }, alpha);
}

at::Tensor sub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  static const BinaryOp op("aten::sub", "Tensor");
  return op.functional(
      self, other, [alpha](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
        at::sub_out(o, x, y, alpha);
      }, alpha);
}

at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  static const BinaryOp op("aten::mul", "Tensor");
  return op.functional(self, other, [](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
    at::mul_out(o, x, y);
  });
}

at::Tensor div(const at::Tensor& self, const at::Tensor& other) {
  static const BinaryOp op("aten::div", "Tensor");
  return op.functional(self, other, [](at::Tensor& o, const at::Tensor& x, const at::Tensor& y) {
    at::div_out(o, x, y);
  });
}

at::Tensor& add_(at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  static const BinaryOp op("aten::add_", "Tensor");
  return op.inplace(
      self, other, [alpha](at::Tensor& o, const at::Tensor&, const at::Tensor& y) {
        o.add_(y, alpha);
      }, alpha);
}

at::Tensor& mul_(at::Tensor& self, const at::Tensor& other) {
  static const BinaryOp op("aten::mul_", "Tensor");
  return op.inplace(self, other, [](at::Tensor& o, const at::Tensor&, const at::Tensor& y) {
    o.mul_(y);
  });
}

}  // namespace torchneuron::native
