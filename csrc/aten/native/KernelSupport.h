// What the torch-side wrappers of our own kernels (neuronkernels) share:
// dtype mapping, the threads the kernels run on, and how queued kernel work
// keeps device memory alive.
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include <neuronkernels/types.hpp>

namespace torchneuron::native {

// The kernels' element type for a torch dtype, if they take it.
std::optional<neuronkernels::DType> kernel_dtype(c10::ScalarType t);

// The threads our kernels run on, as a neuronkernels::ParallelFor: the
// runtime's compute threads (neuronrt::parallel_for), which spin only briefly
// after a job. Not ATen's OpenMP team, whose threads spin for milliseconds
// after each parallel region, taking the core the host thread issues the
// next ops on; except when that team has just run an ATen kernel on this
// worker and is spinning anyway (csrc/runtime/WorkerThreads.h).
void device_parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body);

// Multiply-adds below which a kernel runs on the worker alone (a few
// microseconds: handing out chunks would cost more than it saves).
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

// The threads for a kernel call of `work` multiply-adds (or elements):
// serial_for below kMinParallelWork, device_parallel_for from there.
neuronkernels::ParallelFor kernel_parallel_for(int64_t work);

// The storages kernel work queued next on the current stream must keep alive
// until it ran: those whose memory is not ordered by the stream
// (ordered_by_stream, csrc/aten/Launch.h). Storages, not the user's tensors:
// a tensor's Python object must not be released on a worker thread (that
// needs the GIL, which a worker cannot take while the interpreter shuts
// down); a storage's last reference from a queued task is a plain C++
// release.
std::vector<c10::Storage> storages_to_keep(std::initializer_list<const at::Tensor*> tensors);

}  // namespace torchneuron::native
