#include "csrc/runtime/NeuronHostAllocator.h"

#include <map>
#include <mutex>
#include <vector>

#include "csrc/runtime/NeuronException.h"

namespace torchneuron {
namespace {

// Freed pinned blocks are cached by exact size: pinned buffers in a training
// loop (DataLoader batches) come back with the same sizes every step.
class PinnedCache {
 public:
  void* take(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(size);
      return p;
    }
    return nullptr;
  }
  void put(void* ptr, size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[size].push_back(ptr);
    stats_.active_requests.decrease(1);
    stats_.active_bytes.decrease(size);
  }
  void note_new(size_t size) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.increase(1);
    stats_.allocated_bytes.increase(size);
    stats_.active_requests.increase(1);
    stats_.active_bytes.increase(size);
    stats_.num_host_alloc++;
  }
  void release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, ptrs] : free_) {
      for (void* p : ptrs) {
        nrtFreeHost(p);
        stats_.allocations.decrease(1);
        stats_.allocated_bytes.decrease(size);
        stats_.num_host_free++;
      }
    }
    free_.clear();
  }
  at::HostStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.reset_peak();
    stats_.allocated_bytes.reset_peak();
    stats_.active_requests.reset_peak();
    stats_.active_bytes.reset_peak();
  }
  void reset_accumulated() {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.allocations.reset_accumulated();
    stats_.allocated_bytes.reset_accumulated();
    stats_.active_requests.reset_accumulated();
    stats_.active_bytes.reset_accumulated();
    stats_.num_host_alloc = 0;
    stats_.num_host_free = 0;
  }

 private:
  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  at::HostStats stats_;
};

PinnedCache& cache() {
  static auto* c = new PinnedCache();  // outlives tensors freed at exit
  return *c;
}

struct PinnedContext {
  void* ptr;
  size_t size;
};

void free_pinned(void* ctx) {
  auto* c = static_cast<PinnedContext*>(ctx);
  cache().put(c->ptr, c->size);
  delete c;
}

class NeuronHostAllocatorImpl final : public at::HostAllocator {
 public:
  at::DataPtr allocate(size_t size) override {
    if (size == 0) return {nullptr, nullptr, &free_pinned, at::DeviceType::CPU};
    void* p = cache().take(size);
    if (!p) {
      NEURON_CHECK(nrtHostAlloc(&p, size));
      cache().note_new(size);
    }
    return {p, new PinnedContext{p, size}, &free_pinned, at::DeviceType::CPU};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  // Queued copies keep the tensors they read alive, so no stream tracking
  // is needed before a pinned block is reused.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override { cache().release_all(); }
  at::HostStats get_stats() override { return cache().stats(); }
  void reset_accumulated_stats() override { cache().reset_accumulated(); }
  void reset_peak_stats() override { cache().reset_peak(); }
};

NeuronHostAllocatorImpl g_host_allocator;

}  // namespace

at::HostAllocator* host_allocator() { return &g_host_allocator; }

bool is_pinned_ptr(const void* ptr) { return nrtIsPinnedPointer(ptr) != 0; }

REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_host_allocator)

}  // namespace torchneuron
