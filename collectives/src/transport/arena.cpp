// SharedArena: a memfd mapped by its owner and handed out in blocks
// (first fit over a free map with coalescing); the process-wide registry that
// finds the arena of a pointer; peers' mappings through /proc/<pid>/fd.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <string>

#include "arena_registry.hpp"
#include "neuroncoll/arena.hpp"

namespace neuroncoll {

struct SharedArena::Impl {
  int fd = -1;
  uint64_t uid = 0;
  uint64_t ino = 0;  // of the memfd: peers check they opened this file
  char* base = nullptr;
  size_t size = 0;
  mutable std::mutex mu;
  std::map<size_t, size_t> free_blocks;  // offset -> bytes
  std::map<size_t, size_t> used_blocks;  // offset -> bytes
  size_t allocated = 0;
};

namespace {

// Free ranges this large are returned to the system.
constexpr size_t kReleaseBytes = size_t{1} << 20;
// Alignment of an arena's base (a huge page): SharedArena::allocate's
// alignments up to this hold for addresses, not only offsets.
constexpr size_t kBaseAlignment = size_t{2} << 20;

struct Registry {
  std::mutex mu;
  std::map<uintptr_t, SharedArena::Impl*> by_base;
};

Registry& registry() {
  static Registry* r = new Registry;  // leaked: arenas may outlive statics
  return *r;
}

// Unique per arena, also across fork: a child reseeds, or parent and child
// would hand out the same sequence (and peers would confuse their arenas).
uint64_t new_uid() {
  static std::mutex mu;
  static pid_t seeded_for = 0;
  static std::mt19937_64 gen;
  std::lock_guard<std::mutex> lock(mu);
  if (seeded_for != ::getpid()) {
    seeded_for = ::getpid();
    gen.seed(std::random_device{}() ^ (uint64_t(seeded_for) << 32));
  }
  uint64_t v = 0;
  while (v == 0) v = gen();
  return v;
}

}  // namespace

Status SharedArena::create(size_t bytes, std::unique_ptr<SharedArena>* arena) {
  if (bytes == 0) return {Code::kInvalidArgument, "SharedArena: size 0"};
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  bytes = (bytes + page - 1) / page * page;
  auto impl = std::make_unique<Impl>();
  impl->fd = ::memfd_create("neuroncoll-arena", MFD_CLOEXEC);
  if (impl->fd < 0) return {Code::kSystemError, std::string("memfd_create: ") + std::strerror(errno)};
  if (::ftruncate(impl->fd, static_cast<off_t>(bytes)) != 0) {
    Status s{Code::kSystemError, std::string("ftruncate arena: ") + std::strerror(errno)};
    ::close(impl->fd);
    return s;
  }
  // The base is aligned to kBaseAlignment, so that blocks aligned within the
  // arena are aligned in memory too and huge pages can back them: reserve
  // address space with room to align, map the memfd over the aligned part,
  // give back the rest.
  void* reserved = ::mmap(nullptr, bytes + kBaseAlignment, PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  void* p = MAP_FAILED;
  if (reserved != MAP_FAILED) {
    const uintptr_t r = reinterpret_cast<uintptr_t>(reserved);
    const uintptr_t aligned = (r + kBaseAlignment - 1) / kBaseAlignment * kBaseAlignment;
    p = ::mmap(reinterpret_cast<void*>(aligned), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
               impl->fd, 0);
    if (p == MAP_FAILED) {
      ::munmap(reserved, bytes + kBaseAlignment);
    } else {
      if (aligned > r) ::munmap(reserved, aligned - r);
      const uintptr_t end = r + bytes + kBaseAlignment;
      if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
    }
  }
  if (p == MAP_FAILED) {
    Status s{Code::kSystemError, std::string("mmap arena: ") + std::strerror(errno)};
    ::close(impl->fd);
    return s;
  }
#ifdef MADV_HUGEPAGE
  // Huge pages where the kernel offers them for shared memory (shmem_enabled
  // "advise"): streaming kernels pay a TLB miss per page.
  ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only
#endif
  impl->base = static_cast<char*>(p);
  impl->size = bytes;
  impl->uid = new_uid();
  struct stat st {};
  impl->ino = ::fstat(impl->fd, &st) == 0 ? st.st_ino : 0;
  impl->free_blocks[0] = bytes;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().by_base[reinterpret_cast<uintptr_t>(p)] = impl.get();
  }
  arena->reset(new SharedArena(std::move(impl)));
  return {};
}

SharedArena::SharedArena(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SharedArena::~SharedArena() {
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().by_base.erase(reinterpret_cast<uintptr_t>(impl_->base));
  }
  ::munmap(impl_->base, impl_->size);
  ::close(impl_->fd);
}

void* SharedArena::allocate(size_t bytes, size_t alignment) {
  if (bytes == 0) bytes = 1;
  if (alignment < 64) alignment = 64;
  bytes = (bytes + 63) / 64 * 64;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto it = impl_->free_blocks.begin(); it != impl_->free_blocks.end(); ++it) {
    const size_t start = (it->first + alignment - 1) / alignment * alignment;
    const size_t end = it->first + it->second;
    if (start + bytes > end) continue;
    const size_t block_start = it->first;
    impl_->free_blocks.erase(it);
    if (start > block_start) impl_->free_blocks[block_start] = start - block_start;
    if (start + bytes < end) impl_->free_blocks[start + bytes] = end - (start + bytes);
    impl_->used_blocks[start] = bytes;
    impl_->allocated += bytes;
    return impl_->base + start;
  }
  return nullptr;
}

void SharedArena::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  const size_t offset = static_cast<size_t>(static_cast<char*>(ptr) - impl_->base);
  auto used = impl_->used_blocks.find(offset);
  if (used == impl_->used_blocks.end()) return;
  size_t start = offset, bytes = used->second;
  impl_->allocated -= bytes;
  impl_->used_blocks.erase(used);
  auto next = impl_->free_blocks.lower_bound(start);
  if (next != impl_->free_blocks.end() && next->first == start + bytes) {
    bytes += next->second;
    next = impl_->free_blocks.erase(next);
  }
  if (next != impl_->free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      impl_->free_blocks.erase(prev);
    }
  }
  impl_->free_blocks[start] = bytes;
  // Large free ranges give their pages back (as munmap would): a memfd keeps
  // every page once touched. Whole pages inside the free range only.
  if (bytes >= kReleaseBytes) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t first = (start + page - 1) / page * page, last = (start + bytes) / page * page;
    if (last > first) {
      (void)::fallocate(impl_->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                        static_cast<off_t>(first), static_cast<off_t>(last - first));
    }
  }
}

size_t SharedArena::capacity() const { return impl_->size; }

size_t SharedArena::allocated() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->allocated;
}

void* SharedArena::base() const { return impl_->base; }

namespace transport {

ArenaRef find_arena(const void* ptr, size_t bytes) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().by_base.upper_bound(p);
  if (it == registry().by_base.begin()) return {};
  --it;
  const SharedArena::Impl* a = it->second;
  if (p + bytes > it->first + a->size) return {};
  return ArenaRef{a->uid, static_cast<int32_t>(::getpid()), a->fd, a->ino, a->size, p - it->first};
}

PeerArenas::~PeerArenas() {
  for (auto& [uid, m] : mappings_) {
    if (m.owned) ::munmap(m.base, m.size);
  }
}

Status PeerArenas::resolve(const ArenaRef& ref, void** ptr) {
  const auto key = std::make_pair(ref.pid, ref.uid);
  auto it = mappings_.find(key);
  if (it == mappings_.end()) {
    Mapping m{nullptr, ref.size, false};
    if (ref.pid == ::getpid()) {
      std::lock_guard<std::mutex> lock(registry().mu);
      for (auto& [base, impl] : registry().by_base) {
        if (impl->uid == ref.uid) m.base = impl->base;
      }
    }
    if (!m.base) {
      const std::string path = "/proc/" + std::to_string(ref.pid) + "/fd/" + std::to_string(ref.fd);
      int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0) return {Code::kSystemError, "cannot open peer arena " + path + ": " + std::strerror(errno)};
      struct stat st {};
      if (::fstat(fd, &st) != 0 || st.st_ino != ref.ino) {
        ::close(fd);
        return {Code::kSystemError, "peer arena " + path + " is no longer the arena described"};
      }
      void* p = ::mmap(nullptr, ref.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      ::close(fd);
      if (p == MAP_FAILED) return {Code::kSystemError, "cannot map peer arena " + path + ": " + std::strerror(errno)};
      m.base = p;
      m.owned = true;
    }
    it = mappings_.emplace(key, m).first;
  }
  if (ref.offset > it->second.size) return {Code::kInvalidArgument, "arena offset out of range"};
  *ptr = static_cast<char*>(it->second.base) + ref.offset;
  return {};
}

}  // namespace transport
}  // namespace neuroncoll
