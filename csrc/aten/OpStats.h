// Counts of what ran, per op and per execution path, for
// torchneuron.executed_ops() and torchneuron.fallback_ops().
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace torchneuron {

enum class ExecPath : uint8_t {
  kKernel = 0,   // a direct registration (our own wrapper) ran it
  kQueue = 1,    // ATen CPU kernel on device buffers, queued (zero-copy)
  kSync = 2,     // ATen CPU kernel on device buffers after a stream sync
  kCpuCopy = 3,  // last resort: arguments copied to CPU and back
};
constexpr int kNumExecPaths = 4;
const char* exec_path_name(ExecPath p);

void count_op(const std::string& op_name, ExecPath path);
// op name -> counts indexed by ExecPath
std::map<std::string, std::array<int64_t, kNumExecPaths>> op_counts();
void reset_op_counts();

}  // namespace torchneuron
