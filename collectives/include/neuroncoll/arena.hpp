// Raw-memory sources. A rank whose buffers live in a SharedArena lets its
// peers read them directly (large collectives skip the staging copy); any
// other buffer goes through the group's staging memory. The device allocator
// takes a RawMemorySource, so that device memory can come from an arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "neuroncoll/status.hpp"

namespace neuroncoll {

// What an allocator draws raw memory from: a fixed region handed out in
// blocks. Thread-safe.
class RawMemorySource {
 public:
  virtual ~RawMemorySource() = default;
  // Returns nullptr when no free block of `bytes` is left. `alignment` is a
  // power of two no larger than 4096 (SharedArena: no larger than 2 MiB, the
  // alignment of its base).
  virtual void* allocate(size_t bytes, size_t alignment) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual size_t capacity() const = 0;
  virtual size_t allocated() const = 0;
};

// Memory of one process that the other processes of the host can map: an
// anonymous memory file (memfd, so no name is left in /dev/shm even after a
// crash), which peers open through /proc/<pid>/fd while the owner lives.
// Buffers allocated from it are found by the collectives whatever group they
// are used with.
class SharedArena : public RawMemorySource {
 public:
  static Status create(size_t bytes, std::unique_ptr<SharedArena>* arena);
  ~SharedArena() override;

  void* allocate(size_t bytes, size_t alignment) override;
  void deallocate(void* ptr) override;
  size_t capacity() const override;
  size_t allocated() const override;
  void* base() const;

  struct Impl;

 private:
  explicit SharedArena(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace neuroncoll
