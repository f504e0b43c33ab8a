#include "csrc/aten/native/KernelSupport.h"

#include <neuronrt/neuronrt.hpp>

namespace torchneuron::native {

std::optional<neuronkernels::DType> kernel_dtype(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return neuronkernels::DType::kFloat32;
    case at::kBFloat16: return neuronkernels::DType::kBFloat16;
    case at::kHalf: return neuronkernels::DType::kFloat16;
    default: return std::nullopt;
  }
}

void device_parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  neuronrt::parallel_for(n, body);
}

std::vector<c10::Storage> storages_of(std::initializer_list<const at::Tensor*> tensors) {
  std::vector<c10::Storage> storages;
  storages.reserve(tensors.size());
  for (const at::Tensor* t : tensors) {
    if (t->defined()) storages.push_back(t->storage());
  }
  return storages;
}

}  // namespace torchneuron::native
