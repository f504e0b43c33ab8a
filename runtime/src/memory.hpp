// Raw device memory and pinned host memory, and the registry of both.
#pragma once

#include <cstddef>
#include <cstdint>

namespace neuronrt::detail {

constexpr int kPinnedHost = -1;  // Region::device of nrtHostAlloc blocks

struct Region {
  uintptr_t start = 0;
  size_t size = 0;
  int device = kPinnedHost;
};

// The live allocation (nrtMalloc or nrtHostAlloc) containing ptr, if any.
bool find_region(const void* ptr, Region* out);

}  // namespace neuronrt::detail
