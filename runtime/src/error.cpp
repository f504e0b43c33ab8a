// Error strings, the per-thread last-error message, and neuronrt::check().
#include "error.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <utility>

#include "neuronrt/neuronrt.hpp"

namespace neuronrt::detail {
namespace {

// The message is a plain char array rather than a std::string: a trivially
// destructible thread_local stays usable even while the process is exiting
// (a tensor freed from a static destructor may still report an error).
constexpr size_t kMessageSize = 2048;
thread_local char t_message[kMessageSize] = "";

// The last async failure of this thread, consumed by check().
struct AsyncInfo {
  bool valid = false;
  std::string op_name;
  std::exception_ptr original;
};
thread_local AsyncInfo t_async;

void store_message(const char* text) {
  std::snprintf(t_message, kMessageSize, "%s", text);
}

}  // namespace

nrtStatus set_error(nrtStatus status, const std::string& message) {
  store_message(message.c_str());
  return status;
}

nrtStatus set_errorf(nrtStatus status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(t_message, kMessageSize, fmt, args);
  va_end(args);
  return status;
}

nrtStatus set_async_error(std::string op_name, const std::string& message,
                          std::exception_ptr original) {
  store_message(message.c_str());
  t_async.valid = true;
  t_async.op_name = std::move(op_name);
  t_async.original = std::move(original);
  return nrtErrorLaunchFailure;
}

std::string format_bytes(size_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  char buf[64];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
    return buf;
  }
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof kUnits / sizeof kUnits[0]) {
    value /= 1024.0;
    ++unit;
  }
  std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

}  // namespace neuronrt::detail

extern "C" const char* nrtGetErrorString(nrtStatus status) {
  switch (status) {
    case nrtSuccess: return "nrtSuccess";
    case nrtErrorInvalidValue: return "nrtErrorInvalidValue";
    case nrtErrorInvalidDevice: return "nrtErrorInvalidDevice";
    case nrtErrorMemoryAllocation: return "nrtErrorMemoryAllocation";
    case nrtErrorNotReady: return "nrtErrorNotReady";
    case nrtErrorLaunchFailure: return "nrtErrorLaunchFailure";
    case nrtErrorInvalidHandle: return "nrtErrorInvalidHandle";
    case nrtErrorForkedChild: return "nrtErrorForkedChild";
    case nrtErrorInvalidConfiguration: return "nrtErrorInvalidConfiguration";
  }
  return "nrtErrorUnknown";
}

extern "C" const char* nrtGetLastErrorMessage(void) {
  return neuronrt::detail::t_message;
}

namespace neuronrt {

void check(nrtStatus status) {
  if (status == nrtSuccess) return;
  std::string message = detail::t_message;
  if (message.empty()) message = nrtGetErrorString(status);
  if (status == nrtErrorLaunchFailure) {
    // Move the original out so this thread does not keep it alive.
    std::string op = std::move(detail::t_async.op_name);
    std::exception_ptr original = std::move(detail::t_async.original);
    detail::t_async = {};
    throw AsyncError(std::move(op), message, std::move(original));
  }
  throw Error(status, message);
}

}  // namespace neuronrt
