#include "csrc/aten/Launch.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/HostThreads.h"
#include "csrc/runtime/NeuronAllocator.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronStream.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {
namespace {

void release_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

at::Tensor alias_with(const at::Tensor& t, bool resizable, bool keep) {
  c10::StorageImpl* st = t.storage().unsafeGetStorageImpl();
  c10::DataPtr dp = keep ? c10::DataPtr(const_cast<void*>(st->data()), st, &release_storage,
                                        c10::Device(c10::kCPU))
                         : c10::DataPtr(const_cast<void*>(st->data()), c10::Device(c10::kCPU));
  if (keep) c10::raw::intrusive_ptr::incref(st);
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), st->nbytes(), std::move(dp),
      resizable ? c10::GetCPUAllocator() : nullptr, resizable);
  return tensor_like(c10::Storage(std::move(storage)), c10::DispatchKey::CPU, t);
}

}  // namespace

at::Tensor cpu_alias(const at::Tensor& t, bool resizable) {
  return alias_with(t, resizable, /*keep=*/true);
}

bool ordered_by_stream(const c10::StorageImpl& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.get_deleter() != device_allocator()->raw_deleter()) return false;
  if (dp.get() == nullptr) return true;
  const c10::DeviceIndex device = dp.device().index();
  return neuronrt::CachingAllocator::get().record_use(dp.get(), device,
                                                      current_stream_handle(device));
}

at::Tensor queued_alias(const at::Tensor& t, bool resizable) {
  return alias_with(t, resizable, !ordered_by_stream(*t.storage().unsafeGetStorageImpl()));
}

c10::Storage launch_alias(const c10::Storage& s) {
  c10::StorageImpl* st = s.unsafeGetStorageImpl();
  c10::raw::intrusive_ptr::incref(st);
  c10::DataPtr dp(const_cast<void*>(st->data()), st, &release_storage, st->device());
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), st->nbytes(), std::move(dp), nullptr, false));
}

c10::Storage queued_storage(const c10::Storage& s) {
  c10::StorageImpl* st = s.unsafeGetStorageImpl();
  if (!ordered_by_stream(*st)) return launch_alias(s);
  c10::DataPtr dp(const_cast<void*>(st->data()), st->device());
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), st->nbytes(), std::move(dp), nullptr, false));
}

void launch(c10::DeviceIndex device, const char* op_name, std::function<void()> fn) {
  yield_host_threads_to_device();
  NEURON_TRY { neuronrt::launch(current_stream_handle(device), op_name, std::move(fn)); }
  NEURON_CATCH
}

bool launch_joinable(c10::DeviceIndex device, const char* op_name,
                     std::unique_ptr<neuronrt::JoinableWork> work) {
  yield_host_threads_to_device();
  NEURON_TRY { return neuronrt::launch_joinable(current_stream_handle(device), op_name, std::move(work)); }
  NEURON_CATCH
  return false;
}

void sync_current_stream(c10::DeviceIndex device) {
  nrtStream_t stream = current_stream_handle(device);
  NEURON_TRY {
    blocking_wait([stream] { neuronrt::synchronize(stream); });
  }
  NEURON_CATCH
}

}  // namespace torchneuron
