#include "csrc/aten/native/Random.h"

#include <ATen/ops/bernoulli.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>

namespace torchneuron::native {

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  TORCH_CHECK_VALUE(p >= 0 && p <= 1, "[neuron] native_dropout: dropout probability has to be "
                    "between 0 and 1, but got ", p);
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  double keep = 1.0 - p;
  double scale = keep == 0 ? 0.0 : 1.0 / keep;
  // bernoulli_ takes the neuron generator through the fallback.
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool)).bernoulli_(keep);
  at::Tensor output = at::mul(input, mask).mul_(scale);
  return {output, mask};
}

}  // namespace torchneuron::native
