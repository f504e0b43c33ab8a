#include "csrc/runtime/NeuronGenerator.h"

#include <memory>
#include <mutex>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>

#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronFunctions.h"

namespace torchneuron {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device)
    : c10::GeneratorImpl(make_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(c10::detail::getNonDeterministicRandom())) {}

void NeuronGeneratorImpl::drain() const {
  auto device = device_.index();
  NEURON_TRY {
    blocking_wait([device] { neuronrt::synchronize_device(device); });
  }
  NEURON_CATCH
}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  drain();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_current_seed(seed);
}

uint64_t NeuronGeneratorImpl::current_seed() const { return cpu_.current_seed(); }

uint64_t NeuronGeneratorImpl::seed() {
  auto s = c10::detail::getNonDeterministicRandom();
  set_current_seed(s);
  return s;
}

void NeuronGeneratorImpl::set_offset(uint64_t) {
  TORCH_CHECK(false, "[neuron] Generator.set_offset: the neuron generator is a Mersenne "
                     "Twister like the CPU one and has no offset; use manual_seed or set_state");
}

uint64_t NeuronGeneratorImpl::get_offset() const {
  TORCH_CHECK(false, "[neuron] Generator.get_offset: the neuron generator has no offset; "
                     "use get_state");
}

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  drain();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  cpu_.set_state(at::Tensor(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(
      const_cast<c10::TensorImpl*>(&new_state))));
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  drain();
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  return cpu_.get_state().getIntrusivePtr();
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* g = new NeuronGeneratorImpl(device_.index());
  std::lock_guard<std::mutex> lock(cpu_.mutex());
  g->cpu_ = cpu_.clone();
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device, "default_generator");
  static std::once_flag once;
  static std::vector<at::Generator>* gens = nullptr;
  std::call_once(once, [] {
    gens = new std::vector<at::Generator>();  // never destroyed: used at exit
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      auto g = at::make_generator<NeuronGeneratorImpl>(i);
      // Seeded directly, without set_current_seed's drain of the device: no
      // queued work can use a generator that does not exist yet, and the
      // first use may come from a device worker (a compiled program's
      // dropout), where a device synchronization would deadlock.
      at::Generator cpu = g.get<NeuronGeneratorImpl>()->cpu_generator();
      std::lock_guard<std::mutex> lock(cpu.mutex());
      cpu.set_current_seed(c10::default_rng_seed_val);
      gens->push_back(std::move(g));
    }
  });
  return (*gens)[device];
}

at::Generator cpu_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device,
                                const char* op) {
  if (!gen.has_value() || !gen->defined()) {
    return default_generator(device).get<NeuronGeneratorImpl>()->cpu_generator();
  }
  TORCH_CHECK(gen->device().type() == c10::DeviceType::PrivateUse1, "[neuron] ", op,
              ": expected a generator on neuron for a neuron tensor, got one on ",
              gen->device(), ". Create it with torch.Generator(device='neuron').");
  TORCH_CHECK(gen->device().index() == device, "[neuron] ", op, ": the generator is on ",
              gen->device(), " but the tensor is on neuron:", static_cast<int>(device),
              "; use a generator of the same core.");
  return gen->get<NeuronGeneratorImpl>()->cpu_generator();
}


}  // namespace torchneuron
