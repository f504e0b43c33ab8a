// FileStore: one file per key in a directory. A value is written to a
// temporary file and renamed into place, so readers see whole values; `add`
// serializes on an flock of the directory's lock file. Waits poll with a
// growing sleep (1 ms .. 10 ms), bounded by the caller's timeout.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "neuroncoll/store.hpp"

namespace neuroncoll {
namespace {

Status errno_status(const std::string& what) {
  return {Code::kSystemError, "store: " + what + ": " + std::strerror(errno)};
}

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory) : dir_(std::move(directory)) {}

  Status set(std::string_view key, std::string_view value) override {
    return write_file(path_of(key), value);
  }

  Status get(std::string_view key, std::chrono::milliseconds timeout, std::string* value) override {
    const std::string keys[] = {std::string(key)};
    NEURONCOLL_RETURN_IF_ERROR(wait(keys, timeout));
    return read_file(path_of(key), value);
  }

  Status add(std::string_view key, int64_t delta, int64_t* result) override {
    const std::string lock_path = dir_ + "/.lock";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return errno_status("open " + lock_path);
    if (::flock(fd, LOCK_EX) != 0) {
      Status s = errno_status("flock " + lock_path);
      ::close(fd);
      return s;
    }
    int64_t current = 0;
    std::string text;
    const std::string path = path_of(key);
    if (::access(path.c_str(), F_OK) == 0) {
      Status s = read_file(path, &text);
      if (s.ok() && !text.empty()) current = std::stoll(text);
    }
    current += delta;
    Status s = write_file(path, std::to_string(current));
    ::flock(fd, LOCK_UN);
    ::close(fd);
    if (s.ok() && result) *result = current;
    return s;
  }

  Status wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto sleep = std::chrono::microseconds(500);
    for (;;) {
      std::string missing;
      for (const std::string& key : keys) {
        if (::access(path_of(key).c_str(), F_OK) != 0) missing += (missing.empty() ? "" : ", ") + key;
      }
      if (missing.empty()) return {};
      if (std::chrono::steady_clock::now() >= deadline) {
        return {Code::kTimeout, "store: waited " + std::to_string(timeout.count()) +
                                    " ms for key(s) " + missing};
      }
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(10000));
    }
  }

 private:
  // Keys may hold '/' and other bytes: hex-escape everything but [A-Za-z0-9_-.].
  std::string path_of(std::string_view key) const {
    static const char* hex = "0123456789abcdef";
    std::string out = dir_ + "/k_";
    for (unsigned char c : key) {
      if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
    return out;
  }

  Status write_file(const std::string& path, std::string_view value) {
    static std::atomic<uint64_t> counter{0};
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                            std::to_string(counter.fetch_add(1));
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno_status("open " + tmp);
    size_t done = 0;
    while (done < value.size()) {
      ssize_t n = ::write(fd, value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Status s = errno_status("write " + tmp);
        ::close(fd);
        ::unlink(tmp.c_str());
        return s;
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      Status s = errno_status("rename " + tmp);
      ::unlink(tmp.c_str());
      return s;
    }
    return {};
  }

  Status read_file(const std::string& path, std::string* value) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return errno_status("read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    *value = ss.str();
    return {};
  }

  std::string dir_;
};

}  // namespace

Status make_file_store(const std::string& directory, std::shared_ptr<Store>* store) {
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
    return errno_status("mkdir " + directory);
  }
  *store = std::make_shared<FileStore>(directory);
  return {};
}

}  // namespace neuroncoll
