#include "neuroncompiler/memory_plan.hpp"

#include <algorithm>
#include <numeric>

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests, int64_t alignment) {
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0) throw CompileError("memory plan: alignment must be a power of two");
  auto align = [alignment](int64_t v) { return (v + alignment - 1) & ~(alignment - 1); };
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return requests[a].nbytes > requests[b].nbytes; });
  std::vector<size_t> placed;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of live neighbours
  for (size_t r : order) {
    const BufferRequest& req = requests[r];
    if (req.nbytes < 0 || req.last_step < req.first_step) throw CompileError("memory plan: invalid request");
    if (req.nbytes == 0) continue;
    busy.clear();
    for (size_t q : placed) {
      const BufferRequest& other = requests[q];
      if (other.first_step <= req.last_step && req.first_step <= other.last_step) {
        busy.emplace_back(plan.offsets[q], plan.offsets[q] + other.nbytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + req.nbytes <= begin) break;
      offset = std::max(offset, align(end));
    }
    plan.offsets[r] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, align(offset + req.nbytes));
    placed.push_back(r);
  }
  return plan;
}

}  // namespace neuroncompiler
