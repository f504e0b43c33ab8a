// A POSIX shared-memory segment (shm_open + mmap). The creator picks the name;
// the group unlinks it as soon as every rank has mapped it, so a crash later
// leaves nothing in /dev/shm.
#pragma once

#include <cstddef>
#include <string>

#include "neuroncoll/status.hpp"

namespace neuroncoll::transport {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;

  // Creates (exclusively) and maps `bytes` of zeroed memory under `name`.
  static Status create(const std::string& name, size_t bytes, ShmSegment* segment);
  // Maps an existing segment.
  static Status open(const std::string& name, size_t bytes, ShmSegment* segment);
  // Removes the name (mappings stay valid). Safe to call more than once.
  static void unlink(const std::string& name);

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace neuroncoll::transport
