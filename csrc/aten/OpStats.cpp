#include "csrc/aten/OpStats.h"

#include <memory>
#include <mutex>
#include <unordered_map>

namespace torchneuron {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<std::string, std::unique_ptr<OpCounter>> by_op;
};

Registry& registry() {
  static auto* r = new Registry();  // used until process exit
  return *r;
}

}  // namespace

const char* exec_path_name(ExecPath p) {
  switch (p) {
    case ExecPath::kKernel: return "kernel";
    case ExecPath::kQueue: return "queue";
    case ExecPath::kSync: return "sync";
    case ExecPath::kCpuCopy: return "cpu_copy";
    case ExecPath::kChained: return "chained";
  }
  return "?";
}

OpCounter& op_counter(const std::string& op_name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& slot = r.by_op[op_name];
  if (!slot) slot = std::make_unique<OpCounter>();
  return *slot;
}

std::map<std::string, std::array<int64_t, kNumExecPaths>> op_counts() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::map<std::string, std::array<int64_t, kNumExecPaths>> out;
  for (const auto& [name, counter] : r.by_op) {
    std::array<int64_t, kNumExecPaths> c{};
    bool any = false;
    for (int p = 0; p < kNumExecPaths; ++p) {
      c[p] = counter->get(static_cast<ExecPath>(p));
      any = any || c[p] != 0;
    }
    if (any) out.emplace(name, c);
  }
  return out;
}

void reset_op_counts() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [name, counter] : r.by_op) counter->reset();
}

}  // namespace torchneuron
