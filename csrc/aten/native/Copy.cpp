#include "csrc/aten/native/Copy.h"

#include <algorithm>
#include <cstring>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/KernelSupport.h"
#include "csrc/runtime/HostThreads.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronHostAllocator.h"
#include "csrc/runtime/NeuronStream.h"

namespace torchneuron::native {
namespace {

// Same dtype, same shape, and both dense with identical strides: one memcpy.
bool plain_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.is_non_overlapping_and_dense() && a.is_conj() == b.is_conj() &&
         a.is_neg() == b.is_neg();
}

// memcpy, on the device's compute threads when large: one thread copies at
// about half the machine's bandwidth, and into memory not touched before
// (model weights arriving) the copy is bound by page faults, which each core
// takes on its own.
void copy_bytes(void* dst, const void* src, size_t n) {
  constexpr size_t kChunk = size_t{1} << 20;
  if (n < 4 * kChunk) {
    std::memcpy(dst, src, n);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  device_parallel_for(static_cast<int64_t>((n + kChunk - 1) / kChunk), [=](int64_t b, int64_t e) {
    const size_t lo = static_cast<size_t>(b) * kChunk;
    const size_t hi = std::min(n, static_cast<size_t>(e) * kChunk);
    std::memcpy(d + lo, s + lo, hi - lo);
  });
}

// Nothing queued on the device's current stream: no queued op can still
// read or write memory this stream hands out.
bool stream_idle(c10::DeviceIndex device) {
  return nrtStreamQuery(current_stream_handle(device)) == nrtSuccess;
}


void host_to_device(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  auto device = dst.device().index();
  if (non_blocking && plain_bytes(src, dst) && is_pinned_ptr(src.const_data_ptr())) {
    // Pinned source: the copy runs on the stream; src stays alive with it.
    size_t n = dst.nbytes();
    void* d = dst.mutable_data_ptr();
    launch(device, "aten::copy_ (host to neuron)", [src, d, n] {
      copy_bytes(d, src.const_data_ptr(), n);
    });
    return;
  }
  // Pageable source and an idle stream (a model's weights arriving, a batch
  // before its step is queued): copy now, from the caller's thread, as CUDA
  // copies pageable memory before it returns. No staging copy, which would
  // double the bytes moved and fault in host memory of the tensor's size.
  if (stream_idle(device)) {
    yield_host_threads_to_device();  // device work from this thread, as a launch is
    if (plain_bytes(src, dst)) {
      copy_bytes(dst.mutable_data_ptr(), src.const_data_ptr(), dst.nbytes());
    } else {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      cpu_alias(dst).copy_(src);  // dtype conversion, broadcasting and layout in one pass
    }
    return;
  }
  // Pageable source behind queued work: stage it now (the caller may
  // overwrite it as soon as we return), then copy on the stream after the
  // work already queued there.
  at::Tensor staged;
  if (plain_bytes(src, dst)) {
    staged = at::empty_strided(src.sizes(), src.strides(), src.options());
    // The host thread alone: the device's compute threads are busy with the queue.
    std::memcpy(staged.mutable_data_ptr(), src.const_data_ptr(), src.nbytes());
  } else {
    staged = at::empty_strided(dst.sizes(), dst.strides(), dst.options().device(c10::kCPU));
    staged.copy_(src);  // dtype conversion, broadcasting and layout on the host
  }
  at::Tensor dst_alias = queued_alias(dst);
  launch_cpu_kernels(device, "aten::copy_ (host to neuron)", dst.numel(), /*matrix=*/false,
                     [staged, dst_alias]() mutable {
    if (dst_alias.is_non_overlapping_and_dense() && staged.strides() == dst_alias.strides()) {
      copy_bytes(dst_alias.mutable_data_ptr(), staged.const_data_ptr(), staged.nbytes());
    } else {
      dst_alias.copy_(staged);
    }
  });
}

void device_to_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  auto device = src.device().index();
  at::Tensor src_alias = cpu_alias(src);
  if (non_blocking && is_pinned_ptr(dst.const_data_ptr())) {
    launch_cpu_kernels(device, "aten::copy_ (neuron to host)", dst.numel(), /*matrix=*/false,
                       [src_alias, dst]() mutable {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      const_cast<at::Tensor&>(dst).copy_(src_alias);
    });
    return;
  }
  sync_current_stream(device);
  if (plain_bytes(src, dst)) {
    copy_bytes(dst.mutable_data_ptr(), src_alias.const_data_ptr(), src.nbytes());
  } else {
    dst.copy_(src_alias);
  }
}

void device_to_device(const at::Tensor& src, const at::Tensor& dst) {
  auto src_dev = src.device().index();
  auto dst_dev = dst.device().index();
  at::Tensor d = queued_alias(dst);
  // One alias storage when they share memory, so copy_ sees the overlap.
  at::Tensor s = src.storage().is_alias_of(dst.storage()) ? d.as_strided(src.sizes(), src.strides(), src.storage_offset()) : queued_alias(src);
  if (s.dtype() != src.dtype()) s = queued_alias(src);
  if (src_dev != dst_dev) {
    // The copy runs on dst's stream after src's queued work; src's stream
    // then waits for the copy, so later writes to src cannot race it.
    neuronrt::Event src_ready(nrtEventDisableTiming);
    src_ready.record(current_stream_handle(src_dev));
    NEURON_CHECK(nrtStreamWaitEvent(current_stream_handle(dst_dev), src_ready.get()));
  }
  launch_cpu_kernels(dst_dev, "aten::copy_ (neuron to neuron)", dst.numel(), /*matrix=*/false,
                     [s, d]() mutable {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    if (plain_bytes(s, d)) {
      copy_bytes(d.mutable_data_ptr(), s.const_data_ptr(), s.nbytes());
    } else {
      d.copy_(s);
    }
  });
  if (src_dev != dst_dev) {
    neuronrt::Event copied(nrtEventDisableTiming);
    copied.record(current_stream_handle(dst_dev));
    NEURON_CHECK(nrtStreamWaitEvent(current_stream_handle(src_dev), copied.get()));
  }
}

}  // namespace

at::Tensor _copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (dst.numel() == 0) return dst;
  // What CPU copy_ refuses, refused here at the call (not when the work runs).
  at::assert_no_internal_overlap(dst);
  if (self.storage().is_alias_of(dst.storage())) at::assert_no_partial_overlap(dst, self);
  TORCH_CHECK(!dst.is_conj() && !dst.is_neg(),
              "[neuron] copy_: the destination must not be a conjugate or negative view");
  NEURON_TRY {
    if (on_neuron(self) && on_neuron(dst)) {
      device_to_device(self, dst);
    } else if (on_neuron(dst)) {
      TORCH_CHECK(self.device().is_cpu(), "[neuron] copy_: cannot copy from ", self.device(),
                  " to ", dst.device(), "; copy through the CPU");
      host_to_device(self, dst, non_blocking);
    } else {
      TORCH_CHECK(dst.device().is_cpu(), "[neuron] copy_: cannot copy from ", self.device(),
                  " to ", dst.device(), "; copy through the CPU");
      device_to_host(self, dst, non_blocking);
    }
  }
  NEURON_CATCH
  static OpCounter& counter = op_counter("aten::_copy_from");
  counter.count(ExecPath::kKernel);
  return dst;
}

at::Tensor _copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return _copy_from(self, dst, false);
}

at::Scalar _local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "[neuron] item: a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  sync_current_stream(self.device().index());
  static OpCounter& counter = op_counter("aten::_local_scalar_dense");
  counter.count(ExecPath::kKernel);
  return cpu_alias(self).item();
}

}  // namespace torchneuron::native
