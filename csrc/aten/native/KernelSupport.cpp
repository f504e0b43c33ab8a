#include "csrc/aten/native/KernelSupport.h"

#include <ATen/Parallel.h>
#include <neuronrt/neuronrt.hpp>

#include "csrc/aten/Launch.h"
#include "csrc/runtime/WorkerThreads.h"

namespace torchneuron::native {

std::optional<neuronkernels::DType> kernel_dtype(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return neuronkernels::DType::kFloat32;
    case at::kBFloat16: return neuronkernels::DType::kBFloat16;
    case at::kHalf: return neuronkernels::DType::kFloat16;
    default: return std::nullopt;
  }
}

// This file is compiled with OpenMP (csrc/CMakeLists.txt): at::parallel_for
// is a header template around `#pragma omp parallel`.
void device_parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (worker_team_is_warm()) {
    at::parallel_for(0, n, 1, body);
  } else {
    neuronrt::parallel_for(n, body);
  }
}

neuronkernels::ParallelFor kernel_parallel_for(int64_t work) {
  if (work < kMinParallelWork) return neuronkernels::serial_for;
  return device_parallel_for;
}

std::vector<c10::Storage> storages_to_keep(std::initializer_list<const at::Tensor*> tensors) {
  std::vector<c10::Storage> storages;
  for (const at::Tensor* t : tensors) {
    if (t->defined() && !ordered_by_stream(*t->storage().unsafeGetStorageImpl())) {
      storages.push_back(t->storage());
    }
  }
  return storages;
}

}  // namespace torchneuron::native
