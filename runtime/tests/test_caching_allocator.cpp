// The caching allocator: reuse, split/merge, pools, exact statistics,
// empty_cache, record_stream, OOM handling and retries.
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "support.hpp"

using neuronrt::CachingAllocator;
using nrt_test::Gate;
using nrt_test::ScopedEnv;

namespace {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

class Allocator : public nrt_test::RuntimeTest {
 protected:
  void SetUp() override {
    alloc.empty_cache();
    alloc.reset_peak_stats(0);
    alloc.reset_accumulated_stats(0);
    const auto st = alloc.stats(0);
    ASSERT_EQ(st.all.allocation.current, 0);
    ASSERT_EQ(st.all.reserved_bytes.current, 0);
    s = nrt_test::default_stream(0);
  }
  neuronrt::DeviceStats stats() { return alloc.stats(0); }
  CachingAllocator& alloc = CachingAllocator::get();
  nrtStream_t s = nullptr;
};

}  // namespace

TEST_F(Allocator, ReusesFreedBlock) {
  void* p = alloc.allocate(1000, 0, s);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(alloc.device_of(p), 0);
  alloc.free(p);
  void* q = alloc.allocate(900, 0, s);
  EXPECT_EQ(q, p);
  EXPECT_EQ(stats().num_device_alloc, 1);
  alloc.free(q);
  EXPECT_EQ(alloc.allocate(0, 0, s), nullptr);
  alloc.free(nullptr);
}

TEST_F(Allocator, SizeClassesAndPools) {
  void* a = alloc.allocate(1, 0, s);          // small: 512 B
  void* b = alloc.allocate(MiB, 0, s);        // small: 1 MiB
  void* c = alloc.allocate(MiB + 1, 0, s);    // large: 1 MiB + 512 B
  auto st = stats();
  EXPECT_EQ(st.small_pool.allocated_bytes.current, static_cast<int64_t>(512 + MiB));
  EXPECT_EQ(st.small_pool.requested_bytes.current, static_cast<int64_t>(1 + MiB));
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(MiB + 512));
  EXPECT_EQ(st.large_pool.requested_bytes.current, static_cast<int64_t>(MiB + 1));
  EXPECT_EQ(st.small_pool.segment.current, 1);  // both fit one 2 MiB segment
  EXPECT_EQ(st.small_pool.reserved_bytes.current, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(st.large_pool.segment.current, 1);  // a shared 20 MiB segment
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(st.all.allocation.current, 3);
  EXPECT_EQ(st.all.reserved_bytes.current, static_cast<int64_t>(22 * MiB));
  alloc.free(a);
  alloc.free(b);
  alloc.free(c);
  st = stats();
  EXPECT_EQ(st.all.allocation.current, 0);
  EXPECT_EQ(st.all.allocated_bytes.current, 0);
  EXPECT_EQ(st.all.requested_bytes.current, 0);
  EXPECT_EQ(st.all.reserved_bytes.current, static_cast<int64_t>(22 * MiB));  // cached
}

TEST_F(Allocator, SplitAndMergeSmall) {
  char* a = static_cast<char*>(alloc.allocate(1000, 0, s));
  char* b = static_cast<char*>(alloc.allocate(1000, 0, s));
  EXPECT_EQ(b, a + KiB);  // carved from the same segment
  auto st = stats();
  EXPECT_EQ(st.all.segment.current, 1);
  EXPECT_EQ(st.all.inactive_split.current, 1);
  EXPECT_EQ(st.all.inactive_split_bytes.current, static_cast<int64_t>(2 * MiB - 2 * KiB));
  alloc.free(a);  // a is not adjacent to the free remainder
  st = stats();
  EXPECT_EQ(st.all.inactive_split.current, 2);
  EXPECT_EQ(st.all.inactive_split_bytes.current, static_cast<int64_t>(2 * MiB - KiB));
  alloc.free(b);  // merges a, b and the remainder back into one block
  st = stats();
  EXPECT_EQ(st.all.inactive_split.current, 0);
  EXPECT_EQ(st.all.inactive_split_bytes.current, 0);
  EXPECT_EQ(st.all.active.current, 0);
  auto segs = alloc.snapshot(0);
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].total_size, 2 * MiB);
  EXPECT_EQ(segs[0].allocated_size, 0u);
  // The merged block serves a request of the whole segment's small limit.
  void* c = alloc.allocate(MiB, 0, s);
  EXPECT_EQ(c, a);
  alloc.free(c);
}

TEST_F(Allocator, LargeRequestsRoundTo512Bytes) {
  void* a = alloc.allocate(5 * MiB / 2, 0, s);  // 2.5 MiB counts as 2.5 MiB
  auto st = stats();
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(5 * MiB / 2));
  EXPECT_EQ(st.large_pool.requested_bytes.current, static_cast<int64_t>(5 * MiB / 2));
  EXPECT_EQ(st.large_pool.active_bytes.current, static_cast<int64_t>(5 * MiB / 2));
  void* b = alloc.allocate(3 * MiB + 1, 0, s);
  st = stats();
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(11 * MiB / 2 + 512));
  EXPECT_EQ(st.large_pool.requested_bytes.current, static_cast<int64_t>(11 * MiB / 2 + 1));
  EXPECT_EQ(st.large_pool.segment.current, 1);
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(st.large_pool.inactive_split.current, 1);
  EXPECT_EQ(st.large_pool.inactive_split_bytes.current,
            static_cast<int64_t>(20 * MiB - 11 * MiB / 2 - 512));
  alloc.free(a);
  alloc.free(b);
  st = stats();
  EXPECT_EQ(st.all.allocated_bytes.current, 0);
  EXPECT_EQ(st.all.active_bytes.current, 0);
  EXPECT_EQ(st.all.inactive_split.current, 0);  // merged back into one block
  EXPECT_EQ(st.all.inactive_split_bytes.current, 0);
}

TEST_F(Allocator, MidSizeBlocksShareA20MiBSegment) {
  std::vector<char*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(static_cast<char*>(alloc.allocate(3 * MiB, 0, s)));
  for (int i = 1; i < 6; ++i) EXPECT_EQ(blocks[i], blocks[0] + i * 3 * MiB);
  auto st = stats();
  EXPECT_EQ(st.num_device_alloc, 1);
  EXPECT_EQ(st.large_pool.segment.current, 1);
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(18 * MiB));
  EXPECT_EQ(st.large_pool.inactive_split.current, 1);  // the 2 MiB tail
  EXPECT_EQ(st.large_pool.inactive_split_bytes.current, static_cast<int64_t>(2 * MiB));
  // The 2 MiB tail cannot hold a 7th: a second shared segment.
  blocks.push_back(static_cast<char*>(alloc.allocate(3 * MiB, 0, s)));
  st = stats();
  EXPECT_EQ(st.num_device_alloc, 2);
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(40 * MiB));
  EXPECT_EQ(st.large_pool.allocation.current, 7);
  EXPECT_EQ(st.large_pool.inactive_split.current, 2);
  EXPECT_EQ(st.large_pool.inactive_split_bytes.current, static_cast<int64_t>(19 * MiB));
  auto segs = alloc.snapshot(0);
  ASSERT_EQ(segs.size(), 2u);
  size_t allocated = 0;
  for (const auto& seg : segs) {
    EXPECT_TRUE(seg.is_large);
    EXPECT_EQ(seg.total_size, 20 * MiB);
    allocated += seg.allocated_size;
  }
  EXPECT_EQ(allocated, 21 * MiB);
  // A free block in the middle is reused by a request it fits.
  alloc.free(blocks[2]);
  EXPECT_EQ(stats().large_pool.inactive_split.current, 3);
  char* again = static_cast<char*>(alloc.allocate(3 * MiB - 100, 0, s));
  EXPECT_EQ(again, blocks[2]);
  blocks[2] = again;
  for (char* p : blocks) alloc.free(p);
  st = stats();
  EXPECT_EQ(st.all.allocation.current, 0);
  EXPECT_EQ(st.all.active.current, 0);
  EXPECT_EQ(st.all.inactive_split.current, 0);
  EXPECT_EQ(st.all.inactive_split_bytes.current, 0);
  EXPECT_EQ(st.large_pool.segment.current, 2);  // cached
}

TEST_F(Allocator, RequestsOf10MiBAndMoreGetTheirOwnSegment) {
  void* a = alloc.allocate(12 * MiB, 0, s);
  auto st = stats();
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(12 * MiB));
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(12 * MiB));
  EXPECT_EQ(st.large_pool.inactive_split.current, 0);
  auto segs = alloc.snapshot(0);
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_EQ(segs[0].total_size, 12 * MiB);
  EXPECT_EQ(segs[0].allocated_size, 12 * MiB);
  void* b = alloc.allocate(10 * MiB, 0, s);  // the boundary: own segment
  void* c = alloc.allocate(10 * MiB - 512, 0, s);  // just below: shared 20 MiB
  void* d = alloc.allocate(12 * MiB + 1, 0, s);  // segment rounded up to 14 MiB
  st = stats();
  EXPECT_EQ(st.num_device_alloc, 4);
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>((12 + 10 + 20 + 14) * MiB));
  EXPECT_EQ(st.large_pool.allocated_bytes.current,
            static_cast<int64_t>(12 * MiB + 10 * MiB + (10 * MiB - 512) + (12 * MiB + 512)));
  EXPECT_EQ(st.large_pool.inactive_split.current, 2);  // tails of c's and d's segments
  EXPECT_EQ(st.large_pool.inactive_split_bytes.current,
            static_cast<int64_t>((10 * MiB + 512) + (2 * MiB - 512)));
  for (void* p : {a, b, c, d}) alloc.free(p);
  EXPECT_EQ(stats().all.inactive_split.current, 0);
}

TEST_F(Allocator, SplitLarge) {
  char* a = static_cast<char*>(alloc.allocate(12 * MiB, 0, s));
  alloc.free(a);
  char* b = static_cast<char*>(alloc.allocate(3 * MiB, 0, s));  // carved from a's segment
  EXPECT_EQ(b, a);
  auto st = stats();
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(3 * MiB));
  EXPECT_EQ(st.large_pool.inactive_split.current, 1);
  EXPECT_EQ(st.large_pool.inactive_split_bytes.current, static_cast<int64_t>(9 * MiB));
  char* c = static_cast<char*>(alloc.allocate(9 * MiB, 0, s));
  EXPECT_EQ(c, a + 3 * MiB);
  EXPECT_EQ(stats().num_device_alloc, 1);
  auto segs = alloc.snapshot(0);
  ASSERT_EQ(segs.size(), 1u);
  EXPECT_TRUE(segs[0].is_large);
  EXPECT_EQ(segs[0].total_size, 12 * MiB);
  EXPECT_EQ(segs[0].allocated_size, 12 * MiB);
  EXPECT_EQ(segs[0].stream_id, 0);
  alloc.free(b);
  alloc.free(c);
  EXPECT_EQ(stats().large_pool.inactive_split.current, 0);
}

TEST_F(Allocator, LargeBlocksSplitOnlyWhenMoreThan1MiBRemains) {
  char* a = static_cast<char*>(alloc.allocate(12 * MiB, 0, s));
  alloc.free(a);
  char* b = static_cast<char*>(alloc.allocate(11 * MiB, 0, s));  // 1 MiB left: not split
  EXPECT_EQ(b, a);
  auto st = stats();
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(12 * MiB));
  EXPECT_EQ(st.large_pool.requested_bytes.current, static_cast<int64_t>(11 * MiB));
  EXPECT_EQ(st.large_pool.inactive_split.current, 0);
  alloc.free(b);
  b = static_cast<char*>(alloc.allocate(11 * MiB - 512, 0, s));  // 1 MiB + 512 B left: split
  EXPECT_EQ(b, a);
  st = stats();
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(11 * MiB - 512));
  EXPECT_EQ(st.large_pool.inactive_split.current, 1);
  EXPECT_EQ(st.large_pool.inactive_split_bytes.current, static_cast<int64_t>(MiB + 512));
  alloc.free(b);
  EXPECT_EQ(stats().large_pool.inactive_split.current, 0);
}

TEST_F(Allocator, StatsCurrentPeakAndReset) {
  void* a = alloc.allocate(100, 0, s);
  void* b = alloc.allocate(200, 0, s);
  void* c = alloc.allocate(3000, 0, s);
  alloc.free(a);
  alloc.free(b);
  auto st = stats();
  EXPECT_EQ(st.all.allocation.current, 1);
  EXPECT_EQ(st.all.allocation.peak, 3);
  EXPECT_EQ(st.all.allocation.allocated, 3);
  EXPECT_EQ(st.all.allocation.freed, 2);
  EXPECT_EQ(st.all.allocated_bytes.current, 3072);
  EXPECT_EQ(st.all.allocated_bytes.peak, 512 + 512 + 3072);
  EXPECT_EQ(st.all.requested_bytes.current, 3000);
  EXPECT_EQ(st.all.requested_bytes.peak, 3300);
  EXPECT_EQ(st.small_pool.allocation.peak, 3);
  EXPECT_EQ(st.large_pool.allocation.peak, 0);
  EXPECT_EQ(st.num_device_alloc, 1);
  alloc.reset_peak_stats(0);
  st = stats();
  EXPECT_EQ(st.all.allocation.peak, 1);
  EXPECT_EQ(st.all.allocated_bytes.peak, 3072);
  EXPECT_EQ(st.all.allocation.allocated, 3);  // accumulated stats untouched
  alloc.reset_accumulated_stats(0);
  st = stats();
  EXPECT_EQ(st.all.allocation.allocated, 0);
  EXPECT_EQ(st.all.allocation.freed, 0);
  EXPECT_EQ(st.num_device_alloc, 0);
  EXPECT_EQ(st.all.allocation.current, 1);  // current stats untouched
  alloc.free(c);
}

TEST_F(Allocator, EmptyCacheReturnsMemory) {
  size_t free0 = 0;
  nrtMemGetInfo(0, &free0, nullptr);
  void* p = alloc.allocate(10 * MiB, 0, s);
  alloc.free(p);
  size_t free1 = 0;
  nrtMemGetInfo(0, &free1, nullptr);
  EXPECT_EQ(free1, free0 - 10 * MiB);  // still cached
  alloc.empty_cache(0);
  nrtMemGetInfo(0, &free1, nullptr);
  EXPECT_EQ(free1, free0);
  const auto st = stats();
  EXPECT_EQ(st.all.reserved_bytes.current, 0);
  EXPECT_EQ(st.all.segment.current, 0);
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_TRUE(alloc.snapshot(0).empty());
}

TEST_F(Allocator, StreamsDoNotShareFreeBlocks) {
  nrtStream_t s2 = nrt_test::new_stream(0);
  void* p = alloc.allocate(1000, 0, s);
  alloc.free(p);
  void* q = alloc.allocate(1000, 0, s2);
  EXPECT_NE(q, p);
  EXPECT_EQ(alloc.snapshot(0).size(), 2u);
  alloc.free(q);
  EXPECT_EQ(nrtStreamDestroy(s2), nrtSuccess);
}

TEST_F(Allocator, RecordStreamDefersReuse) {
  nrtStream_t s2 = nrt_test::new_stream(0);
  void* p = alloc.allocate(4096, 0, s);
  alloc.record_stream(p, s2);
  Gate gate;
  neuronrt::launch(s2, "hold", [&gate] { gate.wait(); });  // s2 "uses" p
  alloc.free(p);
  auto st = stats();
  EXPECT_EQ(st.all.allocation.current, 0);
  EXPECT_EQ(st.all.active.current, 1);  // awaiting s2
  EXPECT_EQ(st.all.active_bytes.current, 4096);
  void* q = alloc.allocate(4096, 0, s);
  EXPECT_NE(q, p);
  gate.open();
  neuronrt::synchronize(s2);
  void* r = alloc.allocate(4096, 0, s);
  EXPECT_EQ(r, p);
  alloc.free(q);
  alloc.free(r);
  EXPECT_EQ(stats().all.active.current, 0);
  EXPECT_EQ(nrtStreamDestroy(s2), nrtSuccess);
}

TEST_F(Allocator, RecordStreamOnOwnStreamIsNoOp) {
  void* p = alloc.allocate(4096, 0, s);
  alloc.record_stream(p, s);
  alloc.free(p);
  EXPECT_EQ(stats().all.active.current, 0);
  int local = 0;
  EXPECT_THROW(alloc.record_stream(&local, s), neuronrt::Error);
}

// Work queued on the block's own stream needs nothing: a block the host
// frees under it is reused at once, by later work of the same stream.
TEST_F(Allocator, RecordUseOnOwnStreamReusesAtOnce) {
  void* p = alloc.allocate(4096, 0, s);
  EXPECT_TRUE(alloc.record_use(p, 0, s));
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });  // s "uses" p
  alloc.free(p);
  EXPECT_EQ(stats().all.active.current, 0);
  void* q = alloc.allocate(4096, 0, s);
  EXPECT_EQ(q, p);
  gate.open();
  neuronrt::synchronize(s);
  alloc.free(q);
}

// Work on another stream defers reuse until it ran, as record_stream does,
// also once the device's blocks belong to several streams.
TEST_F(Allocator, RecordUseOnOtherStreamDefersReuse) {
  nrtStream_t s2 = nrt_test::new_stream(0);
  void* other = alloc.allocate(4096, 0, s2);  // several streams allocated now
  void* p = alloc.allocate(4096, 0, s);
  EXPECT_TRUE(alloc.record_use(p, 0, s2));
  EXPECT_TRUE(alloc.record_use(p, 0, s));
  Gate gate;
  neuronrt::launch(s2, "hold", [&gate] { gate.wait(); });
  alloc.free(p);
  EXPECT_EQ(stats().all.active.current, 2);  // `other`, and p awaiting s2
  void* q = alloc.allocate(4096, 0, s);
  EXPECT_NE(q, p);
  gate.open();
  neuronrt::synchronize(s2);
  void* r = alloc.allocate(4096, 0, s);
  EXPECT_EQ(r, p);
  int local = 0;
  EXPECT_FALSE(alloc.record_use(&local, 0, s));  // not an allocation: the caller keeps it
  for (void* x : {other, q, r}) alloc.free(x);
  EXPECT_EQ(stats().all.active.current, 0);
  EXPECT_EQ(nrtStreamDestroy(s2), nrtSuccess);
}

TEST_F(Allocator, OutOfMemoryThrowsWithDetailsAndRecovers) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "64MiB"}};
  void* a = alloc.allocate(40 * MiB, 0, s);
  try {
    alloc.allocate(30 * MiB, 0, s);
    FAIL() << "expected OutOfMemoryError";
  } catch (const neuronrt::OutOfMemoryError& e) {
    EXPECT_EQ(e.status(), nrtErrorMemoryAllocation);
    EXPECT_EQ(e.device, 0);
    EXPECT_EQ(e.requested, 30 * MiB);
    EXPECT_EQ(e.capacity, 64 * MiB);
    EXPECT_EQ(e.allocated, 40 * MiB);
    EXPECT_EQ(e.reserved, 40 * MiB);
    const std::string what = e.what();
    EXPECT_EQ(what,
              "neuron:0 out of memory: tried to allocate 30.00 MiB (31457280 bytes); capacity "
              "64.00 MiB, 40.00 MiB allocated by tensors, 40.00 MiB reserved by the cache "
              "(0 B cached but unused). Free tensors, call torch.neuron.empty_cache(), or "
              "raise TORCHNEURON_DEVICE_MEMORY.");
  }
  auto st = stats();
  EXPECT_EQ(st.num_ooms, 1);
  EXPECT_EQ(st.num_alloc_retries, 1);
  alloc.free(a);
  void* b = alloc.allocate(30 * MiB, 0, s);  // the process carries on
  EXPECT_NE(b, nullptr);
  alloc.free(b);
  alloc.empty_cache(0);
}

TEST_F(Allocator, TightDeviceGivesMidSizeRequestsTheirOwnSegment) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "8MiB"}};
  char* a = static_cast<char*>(alloc.allocate(3 * MiB, 0, s));  // 20 MiB does not fit
  ASSERT_NE(a, nullptr);
  auto st = stats();
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(3 * MiB));
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(3 * MiB));
  EXPECT_EQ(st.num_alloc_retries, 0);  // room for the request: nothing to flush
  EXPECT_EQ(st.num_ooms, 0);
  void* b = alloc.allocate(5 * MiB / 2 + 1, 0, s);  // segment of the rounded size
  st = stats();
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(11 * MiB / 2 + 512));
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(11 * MiB / 2 + 512));
  EXPECT_EQ(st.large_pool.inactive_split.current, 0);
  EXPECT_EQ(alloc.snapshot(0).size(), 2u);
  // Under 2.5 MiB free: no segment fits, not even after flushing and waiting.
  EXPECT_THROW(alloc.allocate(3 * MiB, 0, s), neuronrt::OutOfMemoryError);
  st = stats();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_ooms, 1);
  alloc.free(a);
  void* c = alloc.allocate(2 * MiB, 0, s);  // reuses a's segment, 1 MiB left: not split
  EXPECT_EQ(c, a);
  st = stats();
  EXPECT_EQ(st.large_pool.allocated_bytes.current, static_cast<int64_t>(11 * MiB / 2 + 512));
  EXPECT_EQ(st.large_pool.requested_bytes.current, static_cast<int64_t>(9 * MiB / 2 + 1));
  EXPECT_EQ(st.large_pool.inactive_split.current, 0);
  alloc.free(b);
  alloc.free(c);
  alloc.empty_cache(0);
}

TEST_F(Allocator, TightDeviceFlushesOnlyWhenTheRequestDoesNotFit) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "24MiB"}};
  nrtStream_t s2 = nrt_test::new_stream(0);
  void* a = alloc.allocate(12 * MiB, 0, s2);
  alloc.free(a);  // cached for s2: 12 MiB free on the device
  void* b = alloc.allocate(3 * MiB, 0, s);  // own 3 MiB segment, s2's cache kept
  auto st = stats();
  EXPECT_EQ(st.num_alloc_retries, 0);
  EXPECT_EQ(st.num_device_free, 0);
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(15 * MiB));
  void* c = alloc.allocate(10 * MiB, 0, s);  // 9 MiB free: flush s2's cache, retry
  st = stats();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(st.num_ooms, 0);
  EXPECT_EQ(st.large_pool.reserved_bytes.current, static_cast<int64_t>(13 * MiB));
  alloc.free(b);
  alloc.free(c);
  alloc.empty_cache(0);
  EXPECT_EQ(nrtStreamDestroy(s2), nrtSuccess);
}

TEST_F(Allocator, ImpossibleSizeIsOutOfMemory) {
  EXPECT_THROW(alloc.allocate(SIZE_MAX, 0, s), neuronrt::OutOfMemoryError);
  EXPECT_THROW(alloc.allocate(SIZE_MAX - 100, 0, s), neuronrt::OutOfMemoryError);
  const auto st = stats();
  EXPECT_EQ(st.num_ooms, 2);
  EXPECT_EQ(st.all.reserved_bytes.current, 0);
}

TEST_F(Allocator, FlushesCacheAndRetries) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "64MiB"}};
  nrtStream_t s2 = nrt_test::new_stream(0);
  void* a = alloc.allocate(40 * MiB, 0, s);
  alloc.free(a);  // cached for stream s only
  void* b = alloc.allocate(40 * MiB, 0, s2);
  auto st = stats();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_device_free, 1);
  EXPECT_EQ(st.num_ooms, 0);
  alloc.free(b);
  alloc.empty_cache(0);
  EXPECT_EQ(nrtStreamDestroy(s2), nrtSuccess);
}

TEST_F(Allocator, WaitsForQueuedFreesBeforeGivingUp) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "64MiB"}};
  void* a = alloc.allocate(40 * MiB, 0, s);
  // The last reference to `a` lives in queued work that finishes later.
  neuronrt::launch(s, "late free", [a] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CachingAllocator::get().free(a);
  });
  void* b = alloc.allocate(40 * MiB, 0, s);
  EXPECT_EQ(b, a);
  auto st = stats();
  EXPECT_EQ(st.num_alloc_retries, 1);
  EXPECT_EQ(st.num_ooms, 0);
  alloc.free(b);
  alloc.empty_cache(0);
}

TEST_F(Allocator, FreeFromWorkerThread) {
  void* p = alloc.allocate(12345, 0, s);
  neuronrt::launch(s, "free", [p] { CachingAllocator::get().free(p); });
  neuronrt::synchronize(s);
  EXPECT_EQ(stats().all.allocation.current, 0);
}

TEST_F(Allocator, BadArguments) {
  int local = 0;
  EXPECT_THROW(alloc.free(&local), neuronrt::Error);
  void* raw = nullptr;
  ASSERT_EQ(nrtMalloc(&raw, 64, 0), nrtSuccess);
  EXPECT_THROW(alloc.free(raw), neuronrt::Error);  // raw, not from the cache
  EXPECT_EQ(alloc.device_of(raw), -1);
  EXPECT_EQ(nrtFree(raw), nrtSuccess);
  EXPECT_EQ(alloc.device_of(&local), -1);
  nrtStream_t other = nrt_test::default_stream(1);
  try {
    alloc.allocate(64, 0, other);
    FAIL();
  } catch (const neuronrt::Error& e) {
    EXPECT_EQ(e.status(), nrtErrorInvalidValue);
  }
  EXPECT_THROW(alloc.allocate(64, 0, nullptr), neuronrt::Error);
  void* p = alloc.allocate(64, 0, s);
  alloc.free(p);
  EXPECT_THROW(alloc.free(p), neuronrt::Error);  // double free
}

TEST_F(Allocator, ConcurrentHostThreadsAndWorkerFrees) {
  constexpr int kThreads = 4;
  constexpr int kIters = 300;
  std::vector<nrtStream_t> streams;
  for (int i = 0; i < kThreads; ++i) streams.push_back(nrt_test::new_stream(0));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        const size_t size = 64 + static_cast<size_t>((i * 7919 + t * 104729) % 200000);
        void* p = alloc.allocate(size, 0, streams[t]);
        static_cast<char*>(p)[0] = 1;
        if (i % 2 == 0) {
          alloc.free(p);
        } else {
          neuronrt::launch(streams[t], "free", [p] { CachingAllocator::get().free(p); });
        }
      }
      neuronrt::synchronize(streams[t]);
    });
  }
  for (auto& th : threads) th.join();
  auto st = stats();
  EXPECT_EQ(st.all.allocation.current, 0);
  EXPECT_EQ(st.all.allocation.allocated, kThreads * kIters);
  EXPECT_EQ(st.all.allocated_bytes.current, 0);
  for (nrtStream_t x : streams) EXPECT_EQ(nrtStreamDestroy(x), nrtSuccess);
}
