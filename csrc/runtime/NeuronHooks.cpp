#include "csrc/runtime/NeuronHooks.h"

#include <c10/core/StorageImpl.h>

#include "csrc/runtime/NeuronAllocator.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronGenerator.h"
#include "csrc/runtime/NeuronHostAllocator.h"
#include "csrc/runtime/NeuronStream.h"

namespace torchneuron {

bool NeuronHooks::isAvailable() const { return device_count() > 0; }

void NeuronHooks::init() const {}

bool NeuronHooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  return device_index >= 0 && device_index < device_count();
}

c10::DeviceIndex NeuronHooks::deviceCount() const { return device_count(); }

void NeuronHooks::setCurrentDevice(c10::DeviceIndex device) const { set_device(device); }

c10::DeviceIndex NeuronHooks::getCurrentDevice() const { return current_device(); }

c10::DeviceIndex NeuronHooks::exchangeDevice(c10::DeviceIndex device) const {
  auto old = current_device();
  if (device != old) set_device(device);
  return old;
}

c10::DeviceIndex NeuronHooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  return exchangeDevice(device);
}

const at::Generator& NeuronHooks::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return default_generator(device_index);
}

at::Generator NeuronHooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return at::make_generator<NeuronGeneratorImpl>(device_index < 0 ? current_device()
                                                                  : device_index);
}

at::Device NeuronHooks::getDeviceFromPtr(void* data) const {
  int device = -1;
  NEURON_CHECK(nrtPointerGetDevice(data, &device));
  TORCH_CHECK(device >= 0, "[neuron] pointer ", data, " is not neuron device memory");
  return make_device(static_cast<c10::DeviceIndex>(device));
}

bool NeuronHooks::isPinnedPtr(const void* data) const { return is_pinned_ptr(data); }

at::Allocator* NeuronHooks::getPinnedMemoryAllocator() const { return host_allocator(); }

void NeuronHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
}

void resize_storage_bytes(c10::StorageImpl* storage, size_t newsize) {
  TORCH_CHECK(storage->resizable(), "[neuron] resize: trying to resize storage that is not resizable");
  if (newsize == storage->nbytes()) return;
  auto device = storage->device().index();
  c10::DataPtr fresh = allocate_on(device, newsize);
  size_t keep = std::min(newsize, storage->nbytes());
  if (keep > 0) {
    // Ordered on the current stream; the runtime copy is synchronous with
    // respect to queued work on that device.
    NEURON_CHECK(nrtMemcpy(fresh.get(), storage->data(), keep, nrtMemcpyDeviceToDevice));
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(newsize);
}

namespace {
NeuronHooks* hooks_instance() {
  static auto* hooks = new NeuronHooks();
  return hooks;
}
// Registered at load time so torch can ask about the device before any op.
const bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(hooks_instance());
  return true;
}();
}  // namespace

}  // namespace torchneuron
