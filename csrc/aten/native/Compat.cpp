#include "csrc/aten/native/Compat.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/histc.h>
#include <ATen/ops/index_add.h>

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

bool embedding_backward_by_index_add(c10::ScalarType grad_dtype, bool scale_grad_by_freq) {
  // Rare (per-token scaling) or reduced floating types, whose rounding index_add_
  // does not reproduce bit for bit: ATen's kernel.
  return !scale_grad_by_freq && (grad_dtype == at::kFloat || grad_dtype == at::kDouble);
}

void embedding_backward_into(const at::Tensor& grad_weight, const at::Tensor& grad_output,
                             const at::Tensor& indices, int64_t padding_idx) {
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "[neuron] embedding_dense_backward: indices must be int64 or int32, got ",
              indices.scalar_type());
  const int64_t rows = grad_weight.size(0);
  const int64_t dim = grad_output.size(-1);
  TORCH_CHECK(grad_weight.dim() == 2 && grad_weight.size(1) == dim,
              "[neuron] embedding_dense_backward: the gradient of ", rows,
              " rows must have the grad_output's last size ", dim, ", got ", grad_weight.sizes());
  at::Tensor flat_indices = indices.reshape({-1});
  at::Tensor grad = grad_output.reshape({flat_indices.numel(), dim});
  // Rows are added in token order, as ATen's kernel adds them.
  grad_weight.zero_();
  grad_weight.index_add_(0, flat_indices, grad);
  // Only tokens equal to padding_idx add to its row, and ATen skips them.
  if (padding_idx >= 0 && padding_idx < rows) grad_weight.select(0, padding_idx).zero_();
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
  static auto op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::embedding_dense_backward", "");
  if (!embedding_backward_by_index_add(grad_output.scalar_type(), scale_grad_by_freq)) {
    return call_fallback(op, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
        .back()
        .toTensor();
  }
  const int64_t rows = num_weights.guard_int(__FILE__, __LINE__);
  at::Tensor grad_weight = at::empty({rows, grad_output.size(-1)}, grad_output.options());
  embedding_backward_into(grad_weight, grad_output, indices, padding_idx.guard_int(__FILE__, __LINE__));
  return grad_weight;
}

}  // namespace torchneuron::native
