#include "csrc/aten/native/Compat.h"

#include <ATen/ops/histc.h>

#include "csrc/aten/Fallback.h"

namespace torchneuron::native {

bool _has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto strided_dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided &&
           (t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
  };
  if (strided_dense(self) && strided_dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min,
                 const at::Scalar& max) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::histc", "");
  if (at::isFloatingType(self.scalar_type())) {
    return call_fallback(op, self, bins, min, max).back().toTensor();
  }
  // Counts are exact in float32 up to 2^24 per bin; float64 beyond that.
  auto counting = self.numel() < (int64_t{1} << 24) ? at::kFloat : at::kDouble;
  at::Tensor counts = call_fallback(op, self.to(counting), bins, min, max).back().toTensor();
  return counts.to(self.scalar_type());
}

}  // namespace torchneuron::native
