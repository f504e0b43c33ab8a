#include "csrc/aten/OpStats.h"

#include <mutex>
#include <unordered_map>

namespace torchneuron {
namespace {

struct Counts {
  std::mutex mutex;
  std::unordered_map<std::string, std::array<int64_t, kNumExecPaths>> by_op;
};

Counts& counts() {
  static auto* c = new Counts();  // used until process exit
  return *c;
}

}  // namespace

const char* exec_path_name(ExecPath p) {
  switch (p) {
    case ExecPath::kKernel: return "kernel";
    case ExecPath::kQueue: return "queue";
    case ExecPath::kSync: return "sync";
    case ExecPath::kCpuCopy: return "cpu_copy";
  }
  return "?";
}

void count_op(const std::string& op_name, ExecPath path) {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.by_op[op_name][static_cast<int>(path)]++;
}

std::map<std::string, std::array<int64_t, kNumExecPaths>> op_counts() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {c.by_op.begin(), c.by_op.end()};
}

void reset_op_counts() {
  auto& c = counts();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.by_op.clear();
}

}  // namespace torchneuron
