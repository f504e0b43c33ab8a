// Raw device memory, capacity enforcement, the pointer registry, pinned
// memory, devices and basic argument checking.
#include <cstring>
#include <thread>

#include "support.hpp"

using nrt_test::RuntimeTest;
using nrt_test::ScopedEnv;

namespace {
constexpr size_t MiB = size_t{1} << 20;

std::string last_message() { return nrtGetLastErrorMessage(); }
}  // namespace

using Memory = RuntimeTest;

TEST_F(Memory, AlignedAndWritable) {
  for (size_t size : {size_t{1}, size_t{63}, size_t{100}, size_t{4097}, MiB + 1, 3 * MiB}) {
    void* p = nullptr;
    ASSERT_EQ(nrtMalloc(&p, size, 0), nrtSuccess) << size;
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << size;
    std::memset(p, 0xab, size);
    EXPECT_EQ(static_cast<unsigned char*>(p)[size - 1], 0xab);
    EXPECT_EQ(nrtFree(p), nrtSuccess);
  }
}

TEST_F(Memory, ZeroSizeIsNull) {
  void* p = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(nrtMalloc(&p, 0, 0), nrtSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(nrtFree(nullptr), nrtSuccess);
}

TEST_F(Memory, MemGetInfoAccounting) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(nrtMemGetInfo(0, &free0, &total), nrtSuccess);
  EXPECT_EQ(free0, total);
  void* p = nullptr;
  ASSERT_EQ(nrtMalloc(&p, 5 * MiB, 0), nrtSuccess);
  size_t free1 = 0;
  ASSERT_EQ(nrtMemGetInfo(0, &free1, nullptr), nrtSuccess);
  EXPECT_EQ(free1, free0 - 5 * MiB);
  size_t free_other = 0;
  ASSERT_EQ(nrtMemGetInfo(1, &free_other, nullptr), nrtSuccess);
  EXPECT_EQ(free_other, total);  // per device
  ASSERT_EQ(nrtFree(p), nrtSuccess);
  ASSERT_EQ(nrtMemGetInfo(0, &free1, nullptr), nrtSuccess);
  EXPECT_EQ(free1, free0);
}

TEST_F(Memory, CapacityEnforcedAndRecoverable) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "64MiB"}};
  void* a = nullptr;
  ASSERT_EQ(nrtMalloc(&a, 48 * MiB, 0), nrtSuccess);
  void* b = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(nrtMalloc(&b, 32 * MiB, 0), nrtErrorMemoryAllocation);
  EXPECT_EQ(b, nullptr);
  EXPECT_NE(last_message().find("neuron:0 out of memory"), std::string::npos) << last_message();
  // Another device has its own capacity.
  void* c = nullptr;
  ASSERT_EQ(nrtMalloc(&c, 48 * MiB, 1), nrtSuccess);
  ASSERT_EQ(nrtFree(a), nrtSuccess);
  ASSERT_EQ(nrtMalloc(&b, 32 * MiB, 0), nrtSuccess);
  EXPECT_EQ(nrtFree(b), nrtSuccess);
  EXPECT_EQ(nrtFree(c), nrtSuccess);
}

TEST_F(Memory, PointerGetDeviceFindsInteriorPointers) {
  void* p0 = nullptr;
  void* p1 = nullptr;
  ASSERT_EQ(nrtMalloc(&p0, 1000, 0), nrtSuccess);
  ASSERT_EQ(nrtMalloc(&p1, 3 * MiB, 1), nrtSuccess);
  auto device_of = [](const void* p) {
    int d = -2;
    EXPECT_EQ(nrtPointerGetDevice(p, &d), nrtSuccess);
    return d;
  };
  char* c0 = static_cast<char*>(p0);
  char* c1 = static_cast<char*>(p1);
  EXPECT_EQ(device_of(c0), 0);
  EXPECT_EQ(device_of(c0 + 500), 0);
  EXPECT_EQ(device_of(c0 + 999), 0);
  EXPECT_EQ(device_of(c1), 1);
  EXPECT_EQ(device_of(c1 + 2 * MiB + 17), 1);
  EXPECT_EQ(device_of(c1 + 3 * MiB - 1), 1);
  int local = 0;
  EXPECT_EQ(device_of(&local), -1);
  EXPECT_EQ(device_of(nullptr), -1);
  void* pinned = nullptr;
  ASSERT_EQ(nrtHostAlloc(&pinned, 256), nrtSuccess);
  EXPECT_EQ(device_of(pinned), -1);
  EXPECT_EQ(nrtFreeHost(pinned), nrtSuccess);
  EXPECT_EQ(nrtFree(p0), nrtSuccess);
  EXPECT_EQ(nrtFree(p1), nrtSuccess);
  EXPECT_EQ(device_of(c0 + 500), -1);
}

TEST_F(Memory, PinnedRegistry) {
  void* p = nullptr;
  ASSERT_EQ(nrtHostAlloc(&p, 4096), nrtSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_EQ(nrtIsPinnedPointer(p), 1);
  EXPECT_EQ(nrtIsPinnedPointer(static_cast<char*>(p) + 4095), 1);
  int local = 0;
  EXPECT_EQ(nrtIsPinnedPointer(&local), 0);
  void* d = nullptr;
  ASSERT_EQ(nrtMalloc(&d, 64, 0), nrtSuccess);
  EXPECT_EQ(nrtIsPinnedPointer(d), 0);
  // Each free function refuses the other kind.
  EXPECT_EQ(nrtFree(p), nrtErrorInvalidValue);
  EXPECT_NE(last_message().find("nrtFreeHost"), std::string::npos);
  EXPECT_EQ(nrtFreeHost(d), nrtErrorInvalidValue);
  EXPECT_EQ(nrtFreeHost(p), nrtSuccess);
  EXPECT_EQ(nrtIsPinnedPointer(p), 0);
  EXPECT_EQ(nrtFree(d), nrtSuccess);
}

TEST_F(Memory, BadFrees) {
  int local = 0;
  EXPECT_EQ(nrtFree(&local), nrtErrorInvalidHandle);
  void* p = nullptr;
  ASSERT_EQ(nrtMalloc(&p, 256, 0), nrtSuccess);
  EXPECT_EQ(nrtFree(static_cast<char*>(p) + 64), nrtErrorInvalidHandle);  // interior
  EXPECT_EQ(nrtFree(p), nrtSuccess);
  EXPECT_EQ(nrtFree(p), nrtErrorInvalidHandle);  // double free
  EXPECT_EQ(nrtFreeHost(&local), nrtErrorInvalidHandle);
}

TEST_F(Memory, InvalidDevices) {
  void* p = nullptr;
  EXPECT_EQ(nrtMalloc(&p, 64, 2), nrtErrorInvalidDevice);
  EXPECT_NE(last_message().find("invalid device index 2"), std::string::npos) << last_message();
  EXPECT_EQ(nrtMalloc(&p, 64, -1), nrtErrorInvalidDevice);
  nrtDeviceProp prop;
  EXPECT_EQ(nrtGetDeviceProperties(&prop, 5), nrtErrorInvalidDevice);
  EXPECT_EQ(nrtSetDevice(7), nrtErrorInvalidDevice);
  EXPECT_EQ(nrtMemGetInfo(2, nullptr, nullptr), nrtErrorInvalidDevice);
  EXPECT_EQ(nrtDeviceSynchronize(-3), nrtErrorInvalidDevice);
  nrtStream_t s = nullptr;
  EXPECT_EQ(nrtStreamGetDefault(&s, 2), nrtErrorInvalidDevice);
  EXPECT_EQ(nrtStreamCreate(&s, 9, 0), nrtErrorInvalidDevice);
  try {
    neuronrt::CachingAllocator::get().allocate(64, 4, nullptr);
    FAIL();
  } catch (const neuronrt::Error& e) {
    EXPECT_EQ(e.status(), nrtErrorInvalidDevice);
  }
}

TEST_F(Memory, NullArguments) {
  EXPECT_EQ(nrtMalloc(nullptr, 64, 0), nrtErrorInvalidValue);
  EXPECT_EQ(nrtHostAlloc(nullptr, 64), nrtErrorInvalidValue);
  EXPECT_EQ(nrtGetDeviceCount(nullptr), nrtErrorInvalidValue);
  EXPECT_EQ(nrtGetDevice(nullptr), nrtErrorInvalidValue);
  EXPECT_EQ(nrtGetDeviceProperties(nullptr, 0), nrtErrorInvalidValue);
  EXPECT_EQ(nrtPointerGetDevice(nullptr, nullptr), nrtErrorInvalidValue);
}

TEST_F(Memory, CurrentDeviceIsPerThread) {
  int d = -1;
  ASSERT_EQ(nrtGetDevice(&d), nrtSuccess);
  EXPECT_EQ(d, 0);
  ASSERT_EQ(nrtSetDevice(1), nrtSuccess);
  ASSERT_EQ(nrtGetDevice(&d), nrtSuccess);
  EXPECT_EQ(d, 1);
  int other = -1;
  std::thread([&other] { nrtGetDevice(&other); }).join();
  EXPECT_EQ(other, 0);
  ASSERT_EQ(nrtSetDevice(0), nrtSuccess);
}

TEST_F(Memory, DeviceProperties) {
  nrtDeviceProp prop;
  ASSERT_EQ(nrtGetDeviceProperties(&prop, 1), nrtSuccess);
  EXPECT_STREQ(prop.name, "NeuronCore-v3 (software)");
  EXPECT_EQ(prop.coreCount, 2);
  EXPECT_EQ(prop.physicalIndex, 1);
  EXPECT_GT(prop.totalMemory, 0u);
  EXPECT_LE(prop.totalMemory, prop.requestedMemory);
  size_t total = 0;
  ASSERT_EQ(nrtMemGetInfo(1, nullptr, &total), nrtSuccess);
  EXPECT_EQ(total, prop.totalMemory);
}

TEST(ErrorStrings, Names) {
  EXPECT_STREQ(nrtGetErrorString(nrtSuccess), "nrtSuccess");
  EXPECT_STREQ(nrtGetErrorString(nrtErrorMemoryAllocation), "nrtErrorMemoryAllocation");
  EXPECT_STREQ(nrtGetErrorString(nrtErrorForkedChild), "nrtErrorForkedChild");
  EXPECT_STREQ(nrtGetErrorString(nrtErrorInvalidConfiguration), "nrtErrorInvalidConfiguration");
  EXPECT_STREQ(nrtGetErrorString(static_cast<nrtStatus>(99)), "nrtErrorUnknown");
}

TEST(ErrorStrings, CheckThrowsWithLastMessage) {
  EXPECT_NO_THROW(neuronrt::check(nrtSuccess));
  void* p = nullptr;
  const nrtStatus st = nrtMalloc(&p, 64, 3);
  try {
    neuronrt::check(st);
    FAIL();
  } catch (const neuronrt::Error& e) {
    EXPECT_EQ(e.status(), nrtErrorInvalidDevice);
    EXPECT_NE(std::string(e.what()).find("invalid device index 3"), std::string::npos);
  }
}

namespace {
// A source of two 4 MiB slots, counting its calls.
struct TwoSlots {
  alignas(2 * MiB) static inline unsigned char slots[2][4 * MiB];
  bool used[2] = {false, false};
  int allocs = 0, frees = 0;
  static void* allocate(void* ctx, size_t bytes, size_t alignment) {
    auto* s = static_cast<TwoSlots*>(ctx);
    if (bytes > 4 * MiB || alignment > 2 * MiB) return nullptr;
    for (int i = 0; i < 2; ++i) {
      if (!s->used[i]) {
        s->used[i] = true;
        ++s->allocs;
        return slots[i];
      }
    }
    return nullptr;
  }
  static void deallocate(void* ctx, void* ptr) {
    auto* s = static_cast<TwoSlots*>(ctx);
    for (int i = 0; i < 2; ++i) {
      if (ptr == slots[i]) s->used[i] = false;
    }
    ++s->frees;
  }
};
}  // namespace

TEST_F(Memory, MemorySourceServesLargeBlocksUntilFull) {
  TwoSlots slots;
  nrtMemorySource src{&slots, &TwoSlots::allocate, &TwoSlots::deallocate, MiB};
  ASSERT_EQ(nrtSetMemorySource(&src), nrtSuccess);
  void *a = nullptr, *b = nullptr, *c = nullptr, *small = nullptr;
  ASSERT_EQ(nrtMalloc(&a, 3 * MiB, 0), nrtSuccess);
  ASSERT_EQ(nrtMalloc(&small, 1000, 0), nrtSuccess);  // below min_bytes: host memory
  ASSERT_EQ(nrtMalloc(&b, 2 * MiB, 0), nrtSuccess);
  ASSERT_EQ(nrtMalloc(&c, 2 * MiB, 0), nrtSuccess);   // the source is full: host memory
  EXPECT_EQ(a, TwoSlots::slots[0]);
  EXPECT_EQ(b, TwoSlots::slots[1]);
  EXPECT_NE(c, TwoSlots::slots[0]);
  EXPECT_NE(small, TwoSlots::slots[1]);
  EXPECT_EQ(slots.allocs, 2);
  int device = -1;
  ASSERT_EQ(nrtPointerGetDevice(static_cast<char*>(a) + 100, &device), nrtSuccess);
  EXPECT_EQ(device, 0);  // the registry knows source blocks like any other
  // No switching sources under live blocks.
  EXPECT_EQ(nrtSetMemorySource(nullptr), nrtErrorInvalidValue);
  EXPECT_NE(last_message().find("2 blocks"), std::string::npos) << last_message();
  for (void* p : {a, b, c, small}) ASSERT_EQ(nrtFree(p), nrtSuccess);
  EXPECT_EQ(slots.frees, 2);
  EXPECT_EQ(nrtSetMemorySource(nullptr), nrtSuccess);
  ASSERT_EQ(nrtMalloc(&a, 3 * MiB, 0), nrtSuccess);
  EXPECT_NE(a, TwoSlots::slots[0]);
  EXPECT_EQ(nrtFree(a), nrtSuccess);
}
