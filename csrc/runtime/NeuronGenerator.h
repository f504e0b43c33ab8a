// One random generator per core. Random ops run ATen's CPU kernels on the
// device queue, so the generator wraps a CPU generator (same algorithm and
// state format as torch's CPU generator) that those kernels draw from; it is
// separate from the CPU default generator.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torchneuron {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit NeuronGeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator the queued CPU kernels draw from.
  const at::Generator& cpu_generator() const { return cpu_; }

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  // Queued random ops must have drawn before the state is read or replaced.
  void drain() const;
  // mutable: the lock of a const generator is still taken to read it
  mutable at::Generator cpu_;
};

const at::Generator& default_generator(c10::DeviceIndex device);

// The CPU generator a queued kernel must use in place of `gen` (None means
// the device's default generator). Rejects generators of other devices.
at::Generator cpu_generator_for(const std::optional<at::Generator>& gen,
                                c10::DeviceIndex device, const char* op);

}  // namespace torchneuron
