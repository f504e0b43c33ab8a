// at::PrivateUse1HooksInterface: what PyTorch asks of an accelerator beyond
// the guard (availability, generators, pinned memory, storage resize).
#pragma once

#include <ATen/detail/PrivateUse1HooksInterface.h>

namespace torchneuron {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override;
  void init() const override;
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override;
  c10::DeviceIndex deviceCount() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex getCurrentDevice() const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device_index = -1) const override;
  at::Device getDeviceFromPtr(void* data) const override;
  bool isPinnedPtr(const void* data) const override;
  at::Allocator* getPinnedMemoryAllocator() const override;
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

// Grows or shrinks a neuron storage, keeping its first min(old, new) bytes
// (copied on the current stream, after the work already queued).
void resize_storage_bytes(c10::StorageImpl* storage, size_t newsize);

}  // namespace torchneuron
