// The two ops a compiled program uses for PyTorch's RNG-state higher-order ops
// (`run_and_save_rng_state` in a forward graph under activation checkpointing,
// `run_with_rng_state` in its backward; python/torchneuron/compile/rng_prims.py
// runs them eagerly). The serializer (compile/serialize.py) writes them as
// extern steps, so the generator state is a uint8 value of the program like any
// other instead of a CPU tensor the program cannot hold:
//
//   torchneuron::generator_state(Generator? generator=None) -> Tensor
//     the state of the generator the step draws from, read when the step runs:
//     an extern call's generator argument is the device's generator (None
//     means the default one, csrc/aten/CpuKernelCall.cpp), and steps run in
//     graph order, so it is the state the next random step starts from -- what
//     torch.neuron.get_rng_state() returns eagerly at that point.
//   torchneuron::bernoulli_with_state(Tensor self, float p, Tensor state) -> Tensor
//     bernoulli(self, p) drawn from a generator in `state`: what eager
//     run_with_rng_state does (set the device generator's state, draw, restore),
//     without touching the device generator at all.
//
// The device generator wraps a CPU generator (csrc/runtime/NeuronGenerator.h),
// so the state has torch's CPU generator format.
#include <mutex>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/ops/bernoulli.h>
#include <torch/library.h>

namespace torchneuron {
namespace {

at::Tensor generator_state(const std::optional<at::Generator>& generator) {
  at::Generator gen = generator.has_value() && generator->defined() ? *generator : at::detail::getDefaultCPUGenerator();
  TORCH_CHECK(gen.device().is_cpu(), "[neuron] torchneuron::generator_state: expected the CPU generator a "
              "queued kernel draws from, got one on ", gen.device());
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

at::Tensor bernoulli_with_state(const at::Tensor& self, double p, const at::Tensor& state) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>();
  gen.set_state(state.contiguous());
  return at::bernoulli(self, p, gen);
}

}  // namespace

TORCH_LIBRARY(torchneuron, m) {
  m.def("generator_state(Generator? generator=None) -> Tensor");
  m.def("bernoulli_with_state(Tensor self, float p, Tensor state) -> Tensor");
}

TORCH_LIBRARY_IMPL(torchneuron, CompositeExplicitAutograd, m) {
  m.impl("generator_state", generator_state);
}

TORCH_LIBRARY_IMPL(torchneuron, CPU, m) {
  m.impl("bernoulli_with_state", bernoulli_with_state);
}

}  // namespace torchneuron
