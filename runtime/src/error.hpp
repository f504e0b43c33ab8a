// Per-thread error reporting shared by every C entry point.
#pragma once

#include <cstddef>
#include <exception>
#include <string>

#include "neuronrt/neuronrt.h"

namespace neuronrt::detail {

// Records `message` as the calling thread's last error and returns `status`,
// so call sites can write `return set_error(nrtErrorInvalidValue, "...")`.
nrtStatus set_error(nrtStatus status, const std::string& message);
nrtStatus set_errorf(nrtStatus status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Records a queued op's failure (taken out of a stream's first-error slot) so
// that check() can rethrow it as AsyncError. Returns nrtErrorLaunchFailure.
nrtStatus set_async_error(std::string op_name, const std::string& message,
                          std::exception_ptr original);

// "512 B", "1.50 KiB", "2.00 MiB", "24.00 GiB".
std::string format_bytes(size_t bytes);

}  // namespace neuronrt::detail
