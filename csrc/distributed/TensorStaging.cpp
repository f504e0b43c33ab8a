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

void StagedTensor::copy_back() const {
  if (!buf.is_same(user)) cpu_alias(user).copy_(cpu_alias(buf));
}

StagedTensor stage(const at::Tensor& t, bool read) {
  if (t.is_contiguous()) return {t, t};
  // contiguous() queues the copy on the caller's stream, ahead of the
  // collective.
  return {t, read ? t.contiguous() : at::empty(t.sizes(), t.options())};
}

void pack(const std::vector<at::Tensor>& ts, const at::Tensor& flat) {
  at::Tensor dst = cpu_alias(flat);
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    dst.narrow(0, offset, t.numel()).view(t.sizes()).copy_(cpu_alias(t));
    offset += t.numel();
  }
}

void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  at::Tensor src = cpu_alias(flat);
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    cpu_alias(t).copy_(src.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

at::Tensor flat_buffer(const at::Tensor& like, int64_t numel) {
  return at::empty({numel}, like.options().memory_format(c10::MemoryFormat::Contiguous));
}

}  // namespace torchneuron
