#include "csrc/runtime/NeuronGuard.h"

#include <c10/core/Allocator.h>

#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronDtypes.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronStream.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

namespace {
void check_neuron(c10::Device d, const char* what) {
  TORCH_CHECK(d.type() == c10::DeviceType::PrivateUse1, "[neuron] ", what,
              ": expected a neuron device, got ", d);
}
}  // namespace

c10::Device NeuronGuardImpl::exchangeDevice(c10::Device d) const {
  check_neuron(d, "exchangeDevice");
  auto old = current_device();
  if (d.index() != old) set_device(d.index());
  return make_device(old);
}

c10::Device NeuronGuardImpl::getDevice() const { return make_device(current_device()); }

void NeuronGuardImpl::setDevice(c10::Device d) const {
  check_neuron(d, "setDevice");
  set_device(d.index());
}

void NeuronGuardImpl::uncheckedSetDevice(c10::Device d) const noexcept {
  nrtSetDevice(d.index());
}

c10::DeviceIndex NeuronGuardImpl::deviceCount() const noexcept { return device_count(); }

c10::DeviceCapability NeuronGuardImpl::getDeviceCapability(c10::Device d) const {
  check_neuron(d, "get_device_capability");
  if (d.has_index()) check_device_index(d.index(), "get_device_capability");
  return device_capability();  // every core holds the same dtypes
}

c10::Stream NeuronGuardImpl::getStream(c10::Device d) const { return current_stream(d.index()); }

c10::Stream NeuronGuardImpl::getDefaultStream(c10::Device d) const {
  return default_stream(d.index());
}

c10::Stream NeuronGuardImpl::getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const {
  return stream_from_pool(d.index(), isHighPriority ? -1 : 0);
}

c10::Stream NeuronGuardImpl::getNewStream(c10::Device d, int priority) const {
  return stream_from_pool(d.index(), priority);
}

c10::Stream NeuronGuardImpl::exchangeStream(c10::Stream s) const {
  auto old = current_stream(s.device_index());
  set_current_stream(s);
  return old;
}

bool NeuronGuardImpl::queryStream(const c10::Stream& stream) const {
  nrtStatus st = nrtStreamQuery(stream_handle(stream));
  if (st == nrtErrorNotReady) return false;
  NEURON_CHECK(st);
  return true;
}

void NeuronGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  nrtStream_t s = stream_handle(stream);
  NEURON_TRY {
    blocking_wait([s] { neuronrt::synchronize(s); });
  }
  NEURON_CATCH
}

void NeuronGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  auto d = device_index < 0 ? current_device() : device_index;
  check_device_index(d, "synchronize");
  NEURON_TRY {
    blocking_wait([d] { neuronrt::synchronize_device(d); });
  }
  NEURON_CATCH
}

void NeuronGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  if (event) nrtEventDestroy(static_cast<nrtEvent_t>(event));
}

void NeuronGuardImpl::record(void** event, const c10::Stream& stream,
                             const c10::DeviceIndex device_index,
                             const c10::EventFlag flag) const {
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "[neuron] Event.record: event is on neuron:", static_cast<int>(device_index),
              " but the stream is on neuron:", static_cast<int>(stream.device_index()));
  if (!*event) {
    // torch.Event(enable_timing=True) asks for BACKEND_DEFAULT.
    unsigned flags = flag == c10::EventFlag::BACKEND_DEFAULT ? nrtEventDefault
                                                             : nrtEventDisableTiming;
    nrtEvent_t e = nullptr;
    NEURON_CHECK(nrtEventCreate(&e, flags));
    *event = e;
  }
  NEURON_CHECK(nrtEventRecord(static_cast<nrtEvent_t>(*event), stream_handle(stream)));
}

void NeuronGuardImpl::block(void* event, const c10::Stream& stream) const {
  if (!event) return;  // never recorded: nothing to wait for
  NEURON_CHECK(nrtStreamWaitEvent(stream_handle(stream), static_cast<nrtEvent_t>(event)));
}

bool NeuronGuardImpl::queryEvent(void* event) const {
  if (!event) return true;
  nrtStatus st = nrtEventQuery(static_cast<nrtEvent_t>(event));
  if (st == nrtErrorNotReady) return false;
  NEURON_CHECK(st);
  return true;
}

void NeuronGuardImpl::synchronizeEvent(void* event) const {
  if (!event) return;
  nrtStatus st = nrtSuccess;
  blocking_wait([&] { st = nrtEventSynchronize(static_cast<nrtEvent_t>(event)); });
  NEURON_CHECK(st);
}

double NeuronGuardImpl::elapsedTime(void* event1, void* event2, const c10::DeviceIndex) const {
  TORCH_CHECK(event1 && event2,
              "[neuron] Event.elapsed_time: both events must be recorded first");
  float ms = 0;
  NEURON_CHECK(nrtEventElapsedTime(&ms, static_cast<nrtEvent_t>(event1),
                                   static_cast<nrtEvent_t>(event2)));
  return ms;
}

void NeuronGuardImpl::recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                                            const c10::Stream& stream) const {
  if (!data_ptr.get()) return;
  NEURON_TRY {
    neuronrt::CachingAllocator::get().record_stream(data_ptr.get(), stream_handle(stream));
  }
  NEURON_CATCH
}

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace torchneuron
