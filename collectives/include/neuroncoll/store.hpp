// Rendezvous: the key-value store the ranks of a group meet through. In
// production the torch layer backs it with the c10d store of the process
// group; FileStore (a directory of files) serves the C++ tests and tools.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "neuroncoll/status.hpp"

namespace neuroncoll {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value` (bytes), replacing an earlier value.
  virtual Status set(std::string_view key, std::string_view value) = 0;
  // Waits up to `timeout` for `key` to exist and returns its value.
  virtual Status get(std::string_view key, std::chrono::milliseconds timeout, std::string* value) = 0;
  // Atomically adds `delta` to the integer stored at `key` (0 if absent) and
  // returns the new value.
  virtual Status add(std::string_view key, int64_t delta, int64_t* result) = 0;
  // Waits up to `timeout` until every key exists.
  virtual Status wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) = 0;
};

// A store kept as one file per key in `directory` (created if missing);
// processes and threads sharing the directory share the store. Writes are
// atomic (write to a temporary file, then rename); `add` holds an flock.
Status make_file_store(const std::string& directory, std::shared_ptr<Store>* store);

}  // namespace neuroncoll
