// The caching device allocator (modelled on PyTorch's CUDA one, simplified).
//
// Raw segments come from nrtMalloc and are carved into blocks; freed blocks
// go back to a per-device, per-size-class pool keyed by (stream, size, ptr)
// and are reused by later requests on the same stream, splitting big blocks
// and merging free neighbours. Sizes follow CUDA's rules: every request
// rounds up to 512 B; small ones (<= 1 MiB) share 2 MiB segments, mid-size
// ones (< 10 MiB) share 20 MiB segments, bigger ones get their own segment
// rounded up to 2 MiB. A block used by other streams (record_stream)
// is only recycled once an event recorded on each of those streams at free()
// time has completed. One mutex per device; free() may run on worker threads
// (a task dropping the last reference to a buffer), so the mutex is never
// held while waiting for a stream.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <set>
#include <unordered_map>
#include <vector>

#include "device.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "neuronrt/neuronrt.hpp"
#include "stream.hpp"

namespace neuronrt {
namespace {

constexpr size_t kMinBlockSize = 512;               // rounding of every request
constexpr size_t kSmallSize = size_t{1} << 20;      // largest small request
constexpr size_t kSmallBuffer = size_t{2} << 20;    // small-pool segment size
constexpr size_t kLargeBuffer = size_t{20} << 20;   // shared segment for mid-size requests
constexpr size_t kMinLargeAlloc = size_t{10} << 20; // from here a request gets its own segment
constexpr size_t kRoundLarge = size_t{2} << 20;     // rounding of such own segments
// Larger requests cannot be rounded without overflow; no device holds them.
constexpr size_t kMaxRequest = SIZE_MAX / 2;

struct Pool;

struct Block {
  Block(nrtStream_t stream, size_t size, Pool* pool, char* ptr)
      : stream(stream), size(size), pool(pool), ptr(ptr) {}
  nrtStream_t stream;   // the stream the segment belongs to
  size_t size;
  size_t requested = 0;  // caller's size while allocated
  Pool* pool;
  char* ptr;
  bool allocated = false;
  int event_count = 0;   // outstanding record_stream events after free()
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
  std::vector<nrtStream_t> stream_uses;
  bool is_split() const { return prev != nullptr || next != nullptr; }
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    const auto sa = reinterpret_cast<uintptr_t>(a->stream);
    const auto sb = reinterpret_cast<uintptr_t>(b->stream);
    if (sa != sb) return sa < sb;
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};

struct Pool {
  explicit Pool(bool small) : small(small) {}
  const bool small;
  std::set<Block*, BlockLess> blocks;  // free blocks only
};

struct DeviceAlloc {
  explicit DeviceAlloc(int device) : device(device) {}
  const int device;
  std::mutex mu;
  Pool small{true}, large{false};
  std::unordered_map<void*, Block*> allocated;
  std::deque<std::pair<nrtEvent_t, Block*>> pending;  // freed, awaiting other streams
  std::vector<nrtEvent_t> spare_events;  // reused, never destroyed
  DeviceStats stats;
  // The one stream every block of the device was allocated on, kMany once a
  // second stream allocated (set under mu, read without it by record_use).
  std::atomic<nrtStream_t> sole_stream{nullptr};
};

// sole_stream once blocks of the device belong to several streams.
const nrtStream_t kMany = reinterpret_cast<nrtStream_t>(uintptr_t{1});

void update(Stat& s, int64_t delta) {
  s.current += delta;
  s.peak = std::max(s.peak, s.current);
  if (delta > 0) s.allocated += delta;
  else s.freed -= delta;
}

// Applies delta to the device-wide stat and to the block's pool stat.
// (Keep the named reference: GCC 12 applies `(c ? a : b).*field` to a
// temporary copy, silently dropping the update.)
void bump(DeviceStats& st, bool small, Stat PoolStats::*field, int64_t delta) {
  update(st.all.*field, delta);
  PoolStats& pool = small ? st.small_pool : st.large_pool;
  update(pool.*field, delta);
}

int64_t i64(size_t n) { return static_cast<int64_t>(n); }

size_t round_up(size_t size, size_t unit) { return (size + unit - 1) / unit * unit; }

// The block size a request occupies (what allocated_bytes counts).
size_t round_size(size_t size) { return round_up(std::max(size, kMinBlockSize), kMinBlockSize); }

// The size of a new segment for a request of `size` bytes.
size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

bool should_split(bool small, size_t remaining) {
  return small ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

[[noreturn]] void throw_error(nrtStatus status, const char* fmt, const void* p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, p);
  throw Error(status, buf);
}

}  // namespace

struct CachingAllocator::Impl {
  std::atomic<DeviceAlloc*> devices[detail::kMaxCores] = {};
  std::mutex create_mu;

  DeviceAlloc* if_created(int device) {
    if (device < 0 || device >= detail::kMaxCores) return nullptr;
    return devices[device].load(std::memory_order_acquire);
  }
  DeviceAlloc& at(int device) {
    if (DeviceAlloc* d = if_created(device)) [[likely]] return *d;
    std::lock_guard<std::mutex> lock(create_mu);
    DeviceAlloc* d = devices[device].load(std::memory_order_acquire);
    if (d == nullptr) {
      d = new DeviceAlloc(device);
      devices[device].store(d, std::memory_order_release);
    }
    return *d;
  }

  // ---- everything below runs with the device's mutex held ----

  Block* take_free_block(DeviceAlloc& da, Pool& pool, nrtStream_t stream, size_t size) {
    Block key(stream, size, &pool, nullptr);
    auto it = pool.blocks.lower_bound(&key);
    if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
    Block* b = *it;
    pool.blocks.erase(it);
    if (b->is_split()) {
      bump(da.stats, pool.small, &PoolStats::inactive_split, -1);
      bump(da.stats, pool.small, &PoolStats::inactive_split_bytes, -i64(b->size));
    }
    return b;
  }

  Block* new_segment(DeviceAlloc& da, Pool& pool, nrtStream_t stream, size_t size) {
    void* p = nullptr;
    if (nrtMalloc(&p, size, da.device) != nrtSuccess) return nullptr;
    ++da.stats.num_device_alloc;
    bump(da.stats, pool.small, &PoolStats::segment, 1);
    bump(da.stats, pool.small, &PoolStats::reserved_bytes, i64(size));
    return new Block(stream, size, &pool, static_cast<char*>(p));
  }

  void* use_block(DeviceAlloc& da, Block* b, size_t rounded, size_t requested) {
    const bool small = b->pool->small;
    const size_t remaining = b->size - rounded;
    if (should_split(small, remaining)) {
      auto* rest = new Block(b->stream, remaining, b->pool, b->ptr + rounded);
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = rounded;
      b->pool->blocks.insert(rest);
      bump(da.stats, small, &PoolStats::inactive_split, 1);
      bump(da.stats, small, &PoolStats::inactive_split_bytes, i64(remaining));
    }
    b->allocated = true;
    b->requested = requested;
    da.allocated.emplace(b->ptr, b);
    bump(da.stats, small, &PoolStats::allocation, 1);
    bump(da.stats, small, &PoolStats::allocated_bytes, i64(b->size));
    bump(da.stats, small, &PoolStats::requested_bytes, i64(requested));
    bump(da.stats, small, &PoolStats::active, 1);
    bump(da.stats, small, &PoolStats::active_bytes, i64(b->size));
    return b->ptr;
  }

  // Returns a no-longer-active block to its pool, merging free neighbours.
  void free_block(DeviceAlloc& da, Block* b) {
    Pool& pool = *b->pool;
    bump(da.stats, pool.small, &PoolStats::active, -1);
    bump(da.stats, pool.small, &PoolStats::active_bytes, -i64(b->size));
    for (Block* n : {b->prev, b->next}) {
      if (n == nullptr || n->allocated || n->event_count > 0) continue;
      // n is a free block of a split segment: it stops being one.
      bump(da.stats, pool.small, &PoolStats::inactive_split, -1);
      bump(da.stats, pool.small, &PoolStats::inactive_split_bytes, -i64(n->size));
      pool.blocks.erase(n);
      if (n == b->prev) {
        b->ptr = n->ptr;
        b->prev = n->prev;
        if (b->prev) b->prev->next = b;
      } else {
        b->next = n->next;
        if (b->next) b->next->prev = b;
      }
      b->size += n->size;
      delete n;
    }
    if (b->is_split()) {
      bump(da.stats, pool.small, &PoolStats::inactive_split, 1);
      bump(da.stats, pool.small, &PoolStats::inactive_split_bytes, i64(b->size));
    }
    b->requested = 0;
    pool.blocks.insert(b);
  }

  // Records an event on every other stream that used b; b is recycled when
  // they have all completed (process_events).
  void insert_events(DeviceAlloc& da, Block* b) {
    for (nrtStream_t s : b->stream_uses) {
      nrtEvent_t e = nullptr;
      if (!da.spare_events.empty()) {
        e = da.spare_events.back();
        da.spare_events.pop_back();
      } else if (nrtEventCreate(&e, nrtEventDisableTiming) != nrtSuccess) {
        continue;
      }
      if (nrtEventRecord(e, s) != nrtSuccess) {  // e.g. the stream was destroyed
        da.spare_events.push_back(e);
        continue;
      }
      da.pending.emplace_back(e, b);
      ++b->event_count;
    }
    b->stream_uses.clear();
  }

  void process_events(DeviceAlloc& da) {
    for (auto it = da.pending.begin(); it != da.pending.end();) {
      if (nrtEventQuery(it->first) != nrtSuccess) {
        ++it;
        continue;
      }
      Block* b = it->second;
      da.spare_events.push_back(it->first);
      it = da.pending.erase(it);
      if (--b->event_count == 0) free_block(da, b);
    }
  }

  // Gives every cached segment that is entirely free back to the device.
  void release_cached(DeviceAlloc& da) {
    for (Pool* pool : {&da.small, &da.large}) {
      for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
        Block* b = *it;
        if (b->is_split()) {
          ++it;
          continue;
        }
        it = pool->blocks.erase(it);
        nrtFree(b->ptr);
        ++da.stats.num_device_free;
        bump(da.stats, pool->small, &PoolStats::segment, -1);
        bump(da.stats, pool->small, &PoolStats::reserved_bytes, -i64(b->size));
        delete b;
      }
    }
  }

  [[noreturn]] void throw_oom(DeviceAlloc& da, size_t requested) {
    size_t capacity = 0;
    nrtMemGetInfo(da.device, nullptr, &capacity);
    const size_t allocated = static_cast<size_t>(da.stats.all.allocated_bytes.current);
    const size_t reserved = static_cast<size_t>(da.stats.all.reserved_bytes.current);
    ++da.stats.num_ooms;
    char buf[640];
    std::snprintf(buf, sizeof buf,
                  "neuron:%d out of memory: tried to allocate %s (%zu bytes); capacity %s, "
                  "%s allocated by tensors, %s reserved by the cache (%s cached but "
                  "unused). Free tensors, call torch.neuron.empty_cache(), or raise "
                  "TORCHNEURON_DEVICE_MEMORY.",
                  da.device, detail::format_bytes(requested).c_str(), requested,
                  detail::format_bytes(capacity).c_str(),
                  detail::format_bytes(allocated).c_str(),
                  detail::format_bytes(reserved).c_str(),
                  detail::format_bytes(reserved - allocated).c_str());
    throw OutOfMemoryError(buf, da.device, requested, capacity, allocated, reserved);
  }
};

CachingAllocator::CachingAllocator() : impl_(new Impl()) {}

CachingAllocator& CachingAllocator::get() {
  // Leaked on purpose: tensors may be freed during static destruction.
  static CachingAllocator* instance = new CachingAllocator();
  return *instance;
}

void* CachingAllocator::allocate(size_t size, int device, nrtStream_t stream) {
  check(detail::check_device(device));
  if (size == 0) return nullptr;
  check(detail::check_stream(stream));
  if (stream->device != device) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "CachingAllocator::allocate: a stream of neuron:%d cannot allocate on neuron:%d",
                  stream->device, device);
    throw Error(nrtErrorInvalidValue, buf);
  }
  DeviceAlloc& da = impl_->at(device);
  std::unique_lock<std::mutex> lock(da.mu);
  if (size > kMaxRequest) impl_->throw_oom(da, size);
  const size_t rounded = round_size(size);
  Pool& pool = size <= kSmallSize ? da.small : da.large;
  const size_t segment = segment_size(size);
  // A large segment bigger than the request (20 MiB shared, or rounded up to
  // 2 MiB) only saves later nrtMalloc calls. When the device has room for the
  // request but not for that segment, the request gets a segment of its own
  // size instead of an out-of-memory error or a cache flush (CUDA would
  // report out of memory here).
  auto grow = [&]() -> Block* {
    Block* nb = impl_->new_segment(da, pool, stream, segment);
    if (nb == nullptr && !pool.small && segment > rounded) {
      nb = impl_->new_segment(da, pool, stream, rounded);
    }
    return nb;
  };

  if (nrtStream_t sole = da.sole_stream.load(std::memory_order_relaxed); sole != stream) {
    da.sole_stream.store(sole == nullptr ? stream : kMany, std::memory_order_release);
  }
  impl_->process_events(da);
  Block* b = impl_->take_free_block(da, pool, stream, rounded);
  if (b == nullptr) b = grow();
  if (b == nullptr) {
    // The device is full: hand cached, unused segments back and retry.
    ++da.stats.num_alloc_retries;
    impl_->release_cached(da);
    b = grow();
  }
  if (b == nullptr && !on_worker_thread()) {
    // Queued work may be about to free memory (or to finish with blocks
    // recorded on other streams). Wait for it without the lock: workers free
    // memory through this allocator.
    lock.unlock();
    detail::wait_device_idle(device);
    lock.lock();
    impl_->process_events(da);
    b = impl_->take_free_block(da, pool, stream, rounded);
    if (b == nullptr) {
      impl_->release_cached(da);
      b = grow();
    }
  }
  if (b == nullptr) impl_->throw_oom(da, size);
  return impl_->use_block(da, b, rounded, size);
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  if (detail::in_forked_child()) return;  // the parent's memory: leave it alone
  detail::Region r;
  DeviceAlloc* da = nullptr;
  if (detail::find_region(ptr, &r) && r.device >= 0) da = impl_->if_created(r.device);
  if (da == nullptr) {
    throw_error(nrtErrorInvalidValue,
                "CachingAllocator::free: %p was not allocated by the caching allocator", ptr);
  }
  std::lock_guard<std::mutex> lock(da->mu);
  auto it = da->allocated.find(ptr);
  if (it == da->allocated.end()) {
    throw_error(nrtErrorInvalidValue,
                "CachingAllocator::free: %p is not a live allocation (double free?)", ptr);
  }
  Block* b = it->second;
  da->allocated.erase(it);
  b->allocated = false;
  const bool small = b->pool->small;
  bump(da->stats, small, &PoolStats::allocation, -1);
  bump(da->stats, small, &PoolStats::allocated_bytes, -i64(b->size));
  bump(da->stats, small, &PoolStats::requested_bytes, -i64(b->requested));
  if (!b->stream_uses.empty()) impl_->insert_events(*da, b);
  if (b->event_count == 0) impl_->free_block(*da, b);
}

void CachingAllocator::record_stream(void* ptr, nrtStream_t stream) {
  check(detail::check_stream(stream));
  detail::Region r;
  DeviceAlloc* da = nullptr;
  if (detail::find_region(ptr, &r) && r.device >= 0) da = impl_->if_created(r.device);
  if (da == nullptr) {
    throw_error(nrtErrorInvalidValue,
                "CachingAllocator::record_stream: %p was not allocated by the caching allocator",
                ptr);
  }
  std::lock_guard<std::mutex> lock(da->mu);
  auto it = da->allocated.find(ptr);
  if (it == da->allocated.end()) {
    throw_error(nrtErrorInvalidValue,
                "CachingAllocator::record_stream: %p is not the start of a live allocation", ptr);
  }
  Block* b = it->second;
  if (stream == b->stream) return;  // same-stream reuse is always ordered
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

bool CachingAllocator::record_use(void* ptr, int device, nrtStream_t stream) {
  DeviceAlloc* da = impl_->if_created(device);
  if (da == nullptr) return false;
  // Every block of the device belongs to `stream`: its reuse is ordered.
  if (da->sole_stream.load(std::memory_order_acquire) == stream) return true;
  std::lock_guard<std::mutex> lock(da->mu);
  auto it = da->allocated.find(ptr);
  if (it == da->allocated.end()) return false;
  Block* b = it->second;
  if (stream != b->stream &&
      std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
  return true;
}

void CachingAllocator::empty_cache(int device) {
  if (detail::in_forked_child()) return;
  if (device != -1) check(detail::check_device(device));
  for (int d = 0; d < detail::kMaxCores; ++d) {
    if (device != -1 && d != device) continue;
    DeviceAlloc* da = impl_->if_created(d);
    if (da == nullptr) continue;
    std::lock_guard<std::mutex> lock(da->mu);
    impl_->process_events(*da);
    impl_->release_cached(*da);
  }
}

namespace {
// Every Stat of every pool (for the resets).
template <typename F>
void for_each_stat(DeviceStats& stats, F f) {
  for (PoolStats* p : {&stats.all, &stats.small_pool, &stats.large_pool}) {
    for (Stat* s : {&p->allocation, &p->segment, &p->active, &p->inactive_split,
                    &p->allocated_bytes, &p->reserved_bytes, &p->active_bytes,
                    &p->inactive_split_bytes, &p->requested_bytes}) {
      f(*s);
    }
  }
}
}  // namespace

DeviceStats CachingAllocator::stats(int device) {
  check(detail::check_device(device));
  DeviceAlloc& da = impl_->at(device);
  std::lock_guard<std::mutex> lock(da.mu);
  return da.stats;
}

void CachingAllocator::reset_peak_stats(int device) {
  check(detail::check_device(device));
  DeviceAlloc& da = impl_->at(device);
  std::lock_guard<std::mutex> lock(da.mu);
  for_each_stat(da.stats, [](Stat& s) { s.peak = s.current; });
}

void CachingAllocator::reset_accumulated_stats(int device) {
  check(detail::check_device(device));
  DeviceAlloc& da = impl_->at(device);
  std::lock_guard<std::mutex> lock(da.mu);
  for_each_stat(da.stats, [](Stat& s) {
    s.allocated = 0;
    s.freed = 0;
  });
  da.stats.num_alloc_retries = 0;
  da.stats.num_ooms = 0;
  da.stats.num_device_alloc = 0;
  da.stats.num_device_free = 0;
}

std::vector<SegmentInfo> CachingAllocator::snapshot(int device) {
  check(detail::check_device(device));
  DeviceAlloc& da = impl_->at(device);
  std::lock_guard<std::mutex> lock(da.mu);
  // Every block is allocated, pending on events, or free in a pool; segment
  // heads are the blocks without a predecessor.
  std::set<Block*> heads;
  auto note = [&heads](Block* b) {
    if (b->prev == nullptr) heads.insert(b);
  };
  for (auto& [ptr, b] : da.allocated) note(b);
  for (auto& [event, b] : da.pending) note(b);
  for (Block* b : da.small.blocks) note(b);
  for (Block* b : da.large.blocks) note(b);
  std::vector<SegmentInfo> out;
  for (Block* head : heads) {
    SegmentInfo info{reinterpret_cast<uintptr_t>(head->ptr), 0, 0, !head->pool->small,
                     nrtStreamGetId(head->stream)};
    for (Block* b = head; b != nullptr; b = b->next) {
      info.total_size += b->size;
      if (b->allocated) info.allocated_size += b->size;
    }
    out.push_back(info);
  }
  std::sort(out.begin(), out.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
  return out;
}

int CachingAllocator::device_of(const void* ptr) {
  detail::Region r;
  if (ptr == nullptr || !detail::find_region(ptr, &r) || r.device < 0) return -1;
  DeviceAlloc* da = impl_->if_created(r.device);
  if (da == nullptr) return -1;
  std::lock_guard<std::mutex> lock(da->mu);
  return da->allocated.count(const_cast<void*>(ptr)) ? r.device : -1;
}

}  // namespace neuronrt
