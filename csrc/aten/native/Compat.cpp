#include "csrc/aten/native/Compat.h"

#include <ATen/ops/histc.h>
#include <ATen/ops/index_add.h>
#include <ATen/ops/zeros.h>

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

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::embedding_dense_backward", "");
  // Rare (per-token scaling) or reduced floating types, whose rounding index_add_
  // does not reproduce bit for bit: ATen's kernel.
  if (scale_grad_by_freq || at::isReducedFloatingType(grad_output.scalar_type())) {
    return call_fallback(op, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
        .back()
        .toTensor();
  }
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "[neuron] embedding_dense_backward: indices must be int64 or int32, got ",
              indices.scalar_type());
  const int64_t rows = num_weights.guard_int(__FILE__, __LINE__);
  const int64_t pad = padding_idx.guard_int(__FILE__, __LINE__);
  const int64_t dim = grad_output.size(-1);
  at::Tensor flat_indices = indices.reshape({-1});
  at::Tensor grad = grad_output.reshape({flat_indices.numel(), dim});
  // Rows are added in token order, as ATen's kernel adds them.
  at::Tensor grad_weight = at::zeros({rows, dim}, grad_output.options());
  grad_weight.index_add_(0, flat_indices, grad);
  // Only tokens equal to padding_idx add to its row, and ATen skips them.
  if (pad >= 0 && pad < rows) grad_weight.select(0, pad).zero_();
  return grad_weight;
}

}  // namespace torchneuron::native
