#include "csrc/distributed/SharedDeviceMemory.h"

#include <c10/util/Exception.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "csrc/distributed/EnvFlag.h"
#include "neuroncoll/arena.hpp"
#include "neuronrt/neuronrt.h"

namespace torchneuron {
namespace {

struct ArenaSource {
  std::once_flag made;
  std::unique_ptr<neuroncoll::SharedArena> arena;
};

// Leaked on purpose: device memory may be freed during static destruction.
ArenaSource& source() {
  static ArenaSource* s = new ArenaSource;
  return *s;
}

// Made on the first allocation, as large as every core of this process may
// hold (the runtime's capacity is known by then).
void* allocate(void* ctx, size_t bytes, size_t alignment) {
  auto* s = static_cast<ArenaSource*>(ctx);
  std::call_once(s->made, [s] {
    int count = 0;
    size_t capacity = 0;
    if (nrtGetDeviceCount(&count) != nrtSuccess ||
        nrtMemGetInfo(0, nullptr, &capacity) != nrtSuccess) {
      return;
    }
    neuroncoll::Status st = neuroncoll::SharedArena::create(capacity * static_cast<size_t>(count),
                                                            &s->arena);
    if (!st.ok()) {
      TORCH_WARN("torchneuron: device memory cannot be shared with the other local ranks (",
                 st.to_string(), "); large collectives copy through staging memory instead");
    }
  });
  return s->arena ? s->arena->allocate(bytes, alignment) : nullptr;
}

void deallocate(void* ctx, void* ptr) { static_cast<ArenaSource*>(ctx)->arena->deallocate(ptr); }

// Whether the kernel gives shared memory huge pages (transparent huge pages
// for shmem: the bracketed mode of shmem_enabled is always, within_size or
// advise; SharedArena asks with madvise). Without them device memory in the
// arena has 4 KiB pages, and kernels that stream weights pay a TLB miss per
// page: the skinny matmul ran at a third of its speed (docs/distributed.md).
bool shared_memory_has_huge_pages() {
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  if (!f) return false;
  char line[256] = {};
  const bool read = std::fgets(line, sizeof(line), f) != nullptr;
  std::fclose(f);
  if (!read) return false;
  const char* open = std::strchr(line, '[');
  const char* close = open ? std::strchr(open, ']') : nullptr;
  if (!close) return false;
  const std::string mode(open + 1, close);
  return mode == "always" || mode == "within_size" || mode == "advise";
}

bool wanted() {
  if (const auto on = env_flag("TORCHNEURON_DIST_SHARED_MEMORY")) return *on;
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  return local && std::atoi(local) > 1 && shared_memory_has_huge_pages();
}

}  // namespace

void install_shared_device_memory() {
  if (!wanted()) return;
  // Blocks from 1 MiB: the caching allocator's segments (2 MiB and up) and
  // large tensors; smaller raw blocks are not worth a peer's mapping.
  nrtMemorySource src{&source(), &allocate, &deallocate, size_t{1} << 20};
  (void)nrtSetMemorySource(&src);  // an error (bad configuration) surfaces at first device use
}

}  // namespace torchneuron
