// Shared test utilities: scoped environment overrides and a gate for
// holding a stream's worker at a known point.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "neuronrt/neuronrt.hpp"
#include "testing.hpp"

namespace nrt_test {

// Sets environment variables (nullptr unsets) and re-reads the runtime
// configuration; the destructor restores both.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      set(name, value);
    }
    neuronrt::testing::reload_config();
  }
  ~ScopedEnv() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      set(it->first.c_str(), it->second ? it->second->c_str() : nullptr);
    }
    neuronrt::testing::reload_config();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void set(const char* name, const char* value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// A one-shot latch. wait() gives up after 10 s so a bug cannot hang the suite.
class Gate {
 public:
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

inline nrtStream_t default_stream(int device = 0) {
  nrtStream_t s = nullptr;
  neuronrt::check(nrtStreamGetDefault(&s, device));
  return s;
}

inline nrtStream_t new_stream(int device = 0) {
  nrtStream_t s = nullptr;
  neuronrt::check(nrtStreamCreate(&s, device, 0));
  return s;
}

// Every test leaves the devices idle and empty, so capacities and allocator
// statistics start from zero in the next one.
class RuntimeTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (int d = 0; d < 2; ++d) nrtDeviceSynchronize(d);  // drop pending failures
    neuronrt::CachingAllocator::get().empty_cache();
    for (int d = 0; d < 2; ++d) {
      size_t free_bytes = 0, total = 0;
      ASSERT_EQ(nrtMemGetInfo(d, &free_bytes, &total), nrtSuccess);
      EXPECT_EQ(free_bytes, total) << "test leaked device memory on neuron:" << d;
    }
  }
};

}  // namespace nrt_test
