#include "csrc/distributed/TensorStaging.h"

#include <ATen/ops/empty.h>

#include "csrc/aten/Launch.h"

namespace torchneuron {

void check_neuron_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "ProcessGroupNeuron ", op, ": undefined tensor");
  TORCH_CHECK(t.device().is_privateuseone(), "ProcessGroupNeuron ", op,
              ": expected a neuron tensor, got one on ", t.device(),
              " (for CPU tensors give the group a CPU backend too, e.g. backend=\"cpu:gloo,neuron:neuron\")");
  TORCH_CHECK(t.layout() == c10::kStrided, "ProcessGroupNeuron ", op,
              ": only strided (dense) tensors are supported, got layout ", t.layout());
}

void check_same_shape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op,
                      const char* what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    check_neuron_tensor(ts[i], op);
    TORCH_CHECK(ts[i].scalar_type() == like.scalar_type() && ts[i].numel() == like.numel(),
                "ProcessGroupNeuron ", op, ": ", what, "[", i, "] has dtype ", ts[i].scalar_type(),
                " and ", ts[i].numel(), " elements, expected ", like.scalar_type(), " and ",
                like.numel(), " (those of the input)");
  }
}

at::Tensor task_alias(const at::Tensor& t) { return t.defined() ? cpu_alias(t) : at::Tensor(); }

std::vector<at::Tensor> task_aliases(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const at::Tensor& t : ts) out.push_back(task_alias(t));
  return out;
}

// contiguous() queues the copy on the caller's stream, ahead of the
// collective.
at::Tensor contiguous_input(const at::Tensor& t) { return task_alias(t.contiguous()); }

void StagedTensor::copy_back() const {
  if (stand_in) user.copy_(buf);
}

StagedTensor stage(const at::Tensor& t, bool read) {
  if (t.is_contiguous()) {
    at::Tensor a = task_alias(t);
    return {a, a, false};
  }
  return {task_alias(t), task_alias(read ? t.contiguous() : at::empty(t.sizes(), t.options())),
          true};
}

void pack(const std::vector<at::Tensor>& ts, const at::Tensor& flat) {
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    flat.narrow(0, offset, t.numel()).view(t.sizes()).copy_(t);
    offset += t.numel();
  }
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

at::Tensor flat_buffer(const at::Tensor& like, int64_t numel) {
  return at::empty({numel}, like.options().memory_format(c10::MemoryFormat::Contiguous));
}

}  // namespace torchneuron
