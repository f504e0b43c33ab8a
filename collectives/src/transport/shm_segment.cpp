#include "shm_segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace neuroncoll::transport {
namespace {

Status sys_error(const std::string& what, const std::string& name) {
  return {Code::kSystemError, what + " " + name + ": " + std::strerror(errno)};
}

Status map_fd(int fd, const std::string& name, size_t bytes, ShmSegment* segment, void** data) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return sys_error("mmap", name);
  (void)segment;
  *data = p;
  return {};
}

}  // namespace

ShmSegment::~ShmSegment() {
  if (data_) ::munmap(data_, size_);
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Status ShmSegment::create(const std::string& name, size_t bytes, ShmSegment* segment) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error("shm_open", name);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    Status s = sys_error("ftruncate", name);
    ::close(fd);
    ::shm_unlink(name.c_str());
    return s;
  }
  void* data = nullptr;
  Status s = map_fd(fd, name, bytes, segment, &data);
  ::close(fd);
  if (!s.ok()) {
    ::shm_unlink(name.c_str());
    return s;
  }
  *segment = ShmSegment();
  segment->data_ = data;
  segment->size_ = bytes;
  return {};
}

Status ShmSegment::open(const std::string& name, size_t bytes, ShmSegment* segment) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return sys_error("shm_open", name);
  void* data = nullptr;
  Status s = map_fd(fd, name, bytes, segment, &data);
  ::close(fd);
  if (!s.ok()) return s;
  *segment = ShmSegment();
  segment->data_ = data;
  segment->size_ = bytes;
  return {};
}

void ShmSegment::unlink(const std::string& name) { ::shm_unlink(name.c_str()); }

}  // namespace neuroncoll::transport
