#include "csrc/runtime/NeuronAllocator.h"

#include <cstring>

#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronStream.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {
namespace {

void free_block(void* ptr) { neuronrt::CachingAllocator::get().free(ptr); }

void copy_stat(const neuronrt::Stat& from, c10::CachingDeviceAllocator::Stat& to) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

// PyTorch's stat arrays are indexed by pool: aggregate, small, large.
void copy_array(const neuronrt::Stat neuronrt::PoolStats::*field, const neuronrt::DeviceStats& s,
                c10::CachingDeviceAllocator::StatArray& to) {
  using c10::CachingDeviceAllocator::StatType;
  copy_stat(s.all.*field, to[static_cast<size_t>(StatType::AGGREGATE)]);
  copy_stat(s.small_pool.*field, to[static_cast<size_t>(StatType::SMALL_POOL)]);
  copy_stat(s.large_pool.*field, to[static_cast<size_t>(StatType::LARGE_POOL)]);
}

class NeuronDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override { return allocate_on(current_device(), nbytes); }

  c10::DeleterFnPtr raw_deleter() const override { return &free_block; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    // Ordered after queued work: the runtime's synchronous copy.
    NEURON_CHECK(nrtMemcpy(dest, src, count, nrtMemcpyDeviceToDevice));
  }

  bool initialized() override { return device_count() > 0; }

  void emptyCache(c10::MempoolId_t) override {
    NEURON_TRY { neuronrt::CachingAllocator::get().empty_cache(-1); }
    NEURON_CATCH
  }

  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (!ptr.get()) return;
    NEURON_TRY { neuronrt::CachingAllocator::get().record_stream(ptr.get(), stream_handle(stream)); }
    NEURON_CATCH
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    check_device_index(device, "memory_stats");
    neuronrt::DeviceStats s;
    NEURON_TRY { s = neuronrt::CachingAllocator::get().stats(device); }
    NEURON_CATCH
    c10::CachingDeviceAllocator::DeviceStats out;
    using P = neuronrt::PoolStats;
    copy_array(&P::allocation, s, out.allocation);
    copy_array(&P::segment, s, out.segment);
    copy_array(&P::active, s, out.active);
    copy_array(&P::inactive_split, s, out.inactive_split);
    copy_array(&P::allocated_bytes, s, out.allocated_bytes);
    copy_array(&P::reserved_bytes, s, out.reserved_bytes);
    copy_array(&P::active_bytes, s, out.active_bytes);
    copy_array(&P::inactive_split_bytes, s, out.inactive_split_bytes);
    copy_array(&P::requested_bytes, s, out.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    out.oversize_allocations.current = s.oversize_allocations;
    return out;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_accumulated_memory_stats");
    neuronrt::CachingAllocator::get().reset_accumulated_stats(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    check_device_index(device, "reset_peak_memory_stats");
    neuronrt::CachingAllocator::get().reset_peak_stats(device);
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device, "mem_get_info");
    size_t free_bytes = 0, total = 0;
    NEURON_CHECK(nrtMemGetInfo(device, &free_bytes, &total));
    return {free_bytes, total};
  }
};

NeuronDeviceAllocator g_allocator;

}  // namespace

c10::DeviceAllocator* device_allocator() { return &g_allocator; }

c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes) {
  void* ptr = nullptr;
  NEURON_TRY {
    ptr = neuronrt::CachingAllocator::get().allocate(nbytes, device,
                                                    current_stream_handle(device));
  }
  NEURON_CATCH
  return c10::DataPtr(ptr, ptr, &free_block, make_device(device));
}

std::vector<neuronrt::SegmentInfo> memory_snapshot(c10::DeviceIndex device) {
  check_device_index(device, "memory_snapshot");
  return neuronrt::CachingAllocator::get().snapshot(device);
}

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_allocator);

}  // namespace torchneuron
