// Raw device memory: 64-byte aligned host memory with per-device capacity
// accounting, plus pinned host memory. Both are entered in one ordered map so
// that any interior pointer can be resolved to its allocation (copies and
// the caching allocator rely on that).
#include "memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "device.hpp"
#include "error.hpp"
#include "neuronrt/neuronrt.h"

namespace neuronrt::detail {
namespace {

constexpr size_t kAlignment = 64;
// Blocks this large come straight from mmap: untouched pages cost nothing,
// and munmap returns them to the system at once.
constexpr size_t kMmapThreshold = size_t{1} << 20;

struct Entry {
  size_t size;
  int device;
  bool mmapped;
  bool from_source;  // nrtSetMemorySource's source, not host memory
};

struct Registry {
  std::shared_mutex mu;
  std::map<uintptr_t, Entry> entries;
  nrtMemorySource source{};  // allocate == null: none
  size_t source_blocks = 0;  // live blocks from `source`
};

// Leaked on purpose: frees may arrive during static destruction.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Device memory of at least this size is mapped in 2 MiB-aligned chunks and
// asks the kernel for huge pages (as an accelerator maps its HBM with large
// pages): kernels stream weights through it, and 4 KiB pages would cost a
// TLB miss every 4 KiB.
constexpr size_t kHugePage = size_t{2} << 20;

size_t mapped_size(size_t size) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size >= kHugePage ? round_up(size, kHugePage) : round_up(size, page);
}

void* host_alloc(size_t size, bool* mmapped) {
  if (size >= kMmapThreshold) {
    *mmapped = true;
    const size_t len = mapped_size(size);
    if (size < kHugePage) {
      void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      return p == MAP_FAILED ? nullptr : p;
    }
    // Over-map by one huge page, keep the aligned middle.
    void* raw = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = round_up(start, kHugePage);
    if (aligned > start) munmap(raw, aligned - start);
    const uintptr_t tail = aligned + len, end = start + len + kHugePage;
    if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
#ifdef MADV_HUGEPAGE
    madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);  // advice only
#endif
    return reinterpret_cast<void*>(aligned);
  }
  *mmapped = false;
  return std::aligned_alloc(kAlignment, round_up(size, kAlignment));
}

void host_free(void* p, size_t size, bool mmapped) {
  if (mmapped) {
    munmap(p, mapped_size(size));
  } else {
    std::free(p);
  }
}

void add_entry(void* p, size_t size, int device, bool mmapped, bool from_source = false) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  r.entries.emplace(reinterpret_cast<uintptr_t>(p), Entry{size, device, mmapped, from_source});
  if (from_source) ++r.source_blocks;
}

// Device memory: from the installed source when there is one and it has
// room, else host memory. (The callback runs without the registry's lock.)
void* device_alloc(size_t size, bool* mmapped, bool* from_source) {
  nrtMemorySource source{};
  {
    Registry& r = registry();
    std::shared_lock<std::shared_mutex> lock(r.mu);
    source = r.source;
  }
  *from_source = false;
  if (source.allocate != nullptr && size >= source.min_bytes) {
    void* p = source.allocate(source.ctx, size, size >= kHugePage ? kHugePage : kAlignment);
    if (p != nullptr) {
      *from_source = true;
      *mmapped = false;
      return p;
    }
  }
  return host_alloc(size, mmapped);
}

void device_free(void* p, const Entry& e) {
  if (!e.from_source) return host_free(p, e.size, e.mmapped);
  nrtMemorySource source{};
  {
    Registry& r = registry();
    std::unique_lock<std::shared_mutex> lock(r.mu);
    source = r.source;
    --r.source_blocks;
  }
  source.deallocate(source.ctx, p);
}

enum class Take { kOk, kMissing, kWrongKind };

// Removes the allocation starting exactly at p if it is of the expected kind
// (pinned host or device memory).
Take take_entry(void* p, bool pinned, Entry* out) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  auto it = r.entries.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.entries.end()) return Take::kMissing;
  if ((it->second.device == kPinnedHost) != pinned) return Take::kWrongKind;
  *out = it->second;
  r.entries.erase(it);
  return Take::kOk;
}

// Reserves size bytes of the device's capacity; false if it would not fit.
bool reserve(Device& d, size_t size, size_t capacity) {
  size_t used = d.used_bytes.load(std::memory_order_relaxed);
  do {
    if (size > capacity || used > capacity - size) return false;
  } while (!d.used_bytes.compare_exchange_weak(used, used + size,
                                               std::memory_order_relaxed));
  return true;
}

}  // namespace

bool find_region(const void* ptr, Region* out) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  auto it = r.entries.upper_bound(p);  // first allocation starting after p
  if (it == r.entries.begin()) return false;
  --it;
  if (p - it->first >= it->second.size) return false;
  *out = Region{it->first, it->second.size, it->second.device};
  return true;
}

}  // namespace neuronrt::detail

using namespace neuronrt::detail;

extern "C" {

nrtStatus nrtMalloc(void** ptr, size_t size, int device) {
  if (ptr == nullptr) return set_error(nrtErrorInvalidValue, "nrtMalloc: ptr is null");
  *ptr = nullptr;
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  if (size == 0) return nrtSuccess;
  Device& d = device_at(device);
  const size_t capacity = config().capacity;
  if (!reserve(d, size, capacity)) {
    const size_t used = d.used_bytes.load(std::memory_order_relaxed);
    const size_t free_bytes = used < capacity ? capacity - used : 0;
    return set_errorf(nrtErrorMemoryAllocation,
                      "neuron:%d out of memory: nrtMalloc of %s (%zu bytes) "
                      "exceeds the free device memory (%s free of %s capacity)",
                      device, format_bytes(size).c_str(), size,
                      format_bytes(free_bytes).c_str(), format_bytes(capacity).c_str());
  }
  bool mmapped = false, from_source = false;
  void* p = device_alloc(size, &mmapped, &from_source);
  if (p == nullptr) {
    d.used_bytes.fetch_sub(size, std::memory_order_relaxed);
    return set_errorf(nrtErrorMemoryAllocation,
                      "neuron:%d out of memory: the host could not provide %s "
                      "(%zu bytes) of device memory",
                      device, format_bytes(size).c_str(), size);
  }
  add_entry(p, size, device, mmapped, from_source);
  *ptr = p;
  return nrtSuccess;
}

nrtStatus nrtSetMemorySource(const nrtMemorySource* source) {
  // No api_enter(): installing a source at load time must not read the
  // configuration before the process's first real use of the device.
  if (source != nullptr && (source->allocate == nullptr || source->deallocate == nullptr)) {
    return set_error(nrtErrorInvalidValue, "nrtSetMemorySource: allocate and deallocate are required");
  }
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  if (r.source_blocks != 0) {
    return set_errorf(nrtErrorInvalidValue,
                      "nrtSetMemorySource: %zu blocks of the current source are still allocated",
                      r.source_blocks);
  }
  r.source = source ? *source : nrtMemorySource{};
  return nrtSuccess;
}

nrtStatus nrtFree(void* ptr) {
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  if (ptr == nullptr) return nrtSuccess;
  Entry e{};
  switch (take_entry(ptr, /*pinned=*/false, &e)) {
    case Take::kOk: break;
    case Take::kMissing:
      return set_errorf(nrtErrorInvalidHandle,
                        "nrtFree: %p is not the start of a live nrtMalloc allocation", ptr);
    case Take::kWrongKind:
      return set_errorf(nrtErrorInvalidValue,
                        "nrtFree: %p is pinned host memory; use nrtFreeHost", ptr);
  }
  device_free(ptr, e);
  device_at(e.device).used_bytes.fetch_sub(e.size, std::memory_order_relaxed);
  return nrtSuccess;
}

nrtStatus nrtMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  const size_t capacity = config().capacity;
  const size_t used = device_at(device).used_bytes.load(std::memory_order_relaxed);
  if (free_bytes) *free_bytes = used < capacity ? capacity - used : 0;
  if (total_bytes) *total_bytes = capacity;
  return nrtSuccess;
}

nrtStatus nrtPointerGetDevice(const void* ptr, int* device) {
  if (device == nullptr) return set_error(nrtErrorInvalidValue, "nrtPointerGetDevice: device is null");
  *device = -1;
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  Region r;
  if (find_region(ptr, &r) && r.device != kPinnedHost) *device = r.device;
  return nrtSuccess;
}

nrtStatus nrtHostAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return set_error(nrtErrorInvalidValue, "nrtHostAlloc: ptr is null");
  *ptr = nullptr;
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  if (size == 0) return nrtSuccess;
  bool mmapped = false;
  void* p = host_alloc(size, &mmapped);
  if (p == nullptr) {
    return set_errorf(nrtErrorMemoryAllocation,
                      "nrtHostAlloc: out of pinned host memory allocating %s (%zu bytes)",
                      format_bytes(size).c_str(), size);
  }
  add_entry(p, size, kPinnedHost, mmapped, false);
  *ptr = p;
  return nrtSuccess;
}

nrtStatus nrtFreeHost(void* ptr) {
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  if (ptr == nullptr) return nrtSuccess;
  Entry e{};
  switch (take_entry(ptr, /*pinned=*/true, &e)) {
    case Take::kOk: break;
    case Take::kMissing:
      return set_errorf(nrtErrorInvalidHandle,
                        "nrtFreeHost: %p is not the start of a live nrtHostAlloc block", ptr);
    case Take::kWrongKind:
      return set_errorf(nrtErrorInvalidValue,
                        "nrtFreeHost: %p is device memory; use nrtFree", ptr);
  }
  host_free(ptr, e.size, e.mmapped);
  return nrtSuccess;
}

int nrtIsPinnedPointer(const void* ptr) {
  Region r;
  return (find_region(ptr, &r) && r.device == kPinnedHost) ? 1 : 0;
}

}  // extern "C"
