// How neuron ops run: CPU aliases of device buffers, and launching work on
// the current stream of a device.
#pragma once

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

#include "csrc/runtime/WorkerThreads.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

// A CPU tensor over the same memory as a neuron tensor (same sizes, strides,
// storage offset). It keeps the neuron storage alive. Only for use inside
// queued work or after the stream has been synchronized. A resizable alias
// may be given new (host) memory by a kernel that resizes it; the caller
// must then copy the result back.
at::Tensor cpu_alias(const at::Tensor& t, bool resizable = false);

// Whether work queued next on the current stream of the storage's device may
// use its memory without keeping the storage alive: true for memory of the
// caching allocator, which then reuses it, if the host frees it first, only
// after that work (stream order, as CUDA's allocator; other streams are
// recorded). Otherwise (memory from elsewhere) the work must keep the
// storage. So a host far ahead of its queue reuses the blocks it frees
// instead of faulting in new segments.
bool ordered_by_stream(const c10::StorageImpl& storage);

// cpu_alias for work queued next on the current stream of t's device: it
// keeps the storage alive only if ordered_by_stream says so.
at::Tensor queued_alias(const at::Tensor& t, bool resizable = false);

// The device memory `s` holds now, as a neuron storage of its own (it keeps
// `s` alive, not its memory). Queued work reads what the storage held at
// launch, as cpu_alias gives eager ops, even if the host resizes the storage
// meanwhile: FSDP2 frees unsharded parameters with resize_(0) as soon as a
// forward is queued. The freed memory goes back to the caching allocator,
// whose reuse by the same stream comes after the queued work.
c10::Storage launch_alias(const c10::Storage& s);

// The memory `s` holds now, as a neuron storage for work queued next on the
// current stream of its device: it keeps that memory alive only where
// ordered_by_stream says the work must (then it is launch_alias(s)). A
// compiled program's task holds its buffers this way, as eager ops hold theirs
// through queued_alias.
c10::Storage queued_storage(const c10::Storage& s);

// Enqueues `fn` on the current stream of `device`. op_name must outlive the
// work (a literal or an operator's schema name). A failure inside fn is
// reported at the next launch or synchronization on that stream.
void launch(c10::DeviceIndex device, const char* op_name, std::function<void()> fn);

// Enqueues `work` on the current stream of `device`, or joins it to the work
// queued last when that is waiting joinable work that accepts it
// (neuronrt::launch_joinable). Returns whether it joined.
bool launch_joinable(c10::DeviceIndex device, const char* op_name,
                     std::unique_ptr<neuronrt::JoinableWork> work);

// Enqueues `fn`, which runs ATen CPU kernels on the worker, for an op whose
// work is `elements` elements (`matrix`: a matrix product or convolution):
// the worker lends them its OpenMP team only when that pays
// (csrc/runtime/WorkerThreads.h).
template <typename F>
void launch_cpu_kernels(c10::DeviceIndex device, const char* op_name, int64_t elements,
                        bool matrix, F fn) {
  launch(device, op_name, [fn = std::move(fn), elements, matrix]() mutable {
    WorkerParallelism threads(elements, matrix);
    fn();
  });
}

// Waits for the current stream of `device` (for host reads of device data),
// through blocking_wait (csrc/runtime/BlockingWait.h).
void sync_current_stream(c10::DeviceIndex device);

}  // namespace torchneuron
