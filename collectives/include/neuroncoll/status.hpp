// Status codes of the collectives library. Every call returns a Status; the
// torch layer turns a failed one into an exception in one place.
#pragma once

#include <string>
#include <utility>

namespace neuroncoll {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // caller mistake on this rank (null pointer, bad root, op not valid for dtype)
  kMismatch,         // ranks called the collective with different arguments (reported on every rank)
  kTimeout,          // a peer did not arrive within the group's timeout (names the ranks)
  kPeerError,        // a peer reported a failure of this collective
  kUnsupported,      // a valid request this library does not serve (e.g. ranks on several hosts)
  kSystemError,      // an OS call failed (shm_open, mmap, files of the store)
  kAborted,          // the group failed earlier (timeout) and is no longer usable
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return {}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "timeout: all_reduce ...": code name and message, for logs and tests.
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Returns early from the enclosing function when `expr` fails.
#define NEURONCOLL_RETURN_IF_ERROR(expr)         \
  do {                                           \
    ::neuroncoll::Status _nc_status = (expr);    \
    if (!_nc_status.ok()) return _nc_status;     \
  } while (0)

}  // namespace neuroncoll
