// Counts of what ran, per op and per execution path, for
// torchneuron.executed_ops() and torchneuron.fallback_ops().
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torchneuron {

enum class ExecPath : uint8_t {
  kKernel = 0,   // a direct registration (our own wrapper) ran it
  kQueue = 1,    // ATen CPU kernel on device buffers, queued (zero-copy)
  kSync = 2,     // ATen CPU kernel on device buffers after a stream sync
  kCpuCopy = 3,  // last resort: arguments copied to CPU and back
  kChained = 4,  // queued, joined to the foreach ops queued before it (one pass)
};
constexpr int kNumExecPaths = 5;
const char* exec_path_name(ExecPath p);

// One op's counters. Obtain once (op_counter(name)), then count() is a
// relaxed atomic increment: cheap enough for the per-op hot path.
class OpCounter {
 public:
  void count(ExecPath p) { n_[static_cast<int>(p)].fetch_add(1, std::memory_order_relaxed); }
  int64_t get(ExecPath p) const { return n_[static_cast<int>(p)].load(std::memory_order_relaxed); }
  void reset() {
    for (auto& x : n_) x.store(0, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<int64_t>, kNumExecPaths> n_{};
};

// The counter of an op name ("aten::add.Tensor"); stable for the process.
OpCounter& op_counter(const std::string& op_name);
// op name -> counts indexed by ExecPath (ops that ran at least once)
std::map<std::string, std::array<int64_t, kNumExecPaths>> op_counts();
void reset_op_counts();

}  // namespace torchneuron
