// The arena planner: random lifetimes and sizes; no two live buffers overlap.
#include <gtest/gtest.h>

#include <random>

#include "neuroncompiler/ir.hpp"
#include "neuroncompiler/memory_plan.hpp"

using namespace neuroncompiler;

namespace {

void expect_valid(const std::vector<BufferRequest>& reqs, const MemoryPlan& plan) {
  ASSERT_EQ(plan.offsets.size(), reqs.size());
  for (size_t a = 0; a < reqs.size(); ++a) {
    EXPECT_EQ(plan.offsets[a] % kArenaAlignment, 0);
    EXPECT_LE(plan.offsets[a] + reqs[a].nbytes, plan.arena_bytes);
    for (size_t b = a + 1; b < reqs.size(); ++b) {
      if (reqs[a].nbytes == 0 || reqs[b].nbytes == 0) continue;
      const bool live_together = reqs[a].first_step <= reqs[b].last_step && reqs[b].first_step <= reqs[a].last_step;
      const bool overlap = plan.offsets[a] < plan.offsets[b] + reqs[b].nbytes &&
                           plan.offsets[b] < plan.offsets[a] + reqs[a].nbytes;
      EXPECT_FALSE(live_together && overlap) << "buffers " << a << " and " << b;
    }
  }
}

}  // namespace

TEST(MemoryPlan, RandomLifetimesNeverOverlapWhileLive) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    const int steps = 1 + static_cast<int>(rng() % 30);
    std::vector<BufferRequest> reqs;
    int64_t peak_bound = 0;
    for (int i = 0; i < n; ++i) {
      BufferRequest r;
      r.nbytes = (rng() % 5 == 0) ? 0 : static_cast<int64_t>(rng() % 5000);
      r.first_step = static_cast<int32_t>(rng() % steps);
      r.last_step = r.first_step + static_cast<int32_t>(rng() % 5);
      peak_bound += (r.nbytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
      reqs.push_back(r);
    }
    const MemoryPlan plan = plan_memory(reqs);
    expect_valid(reqs, plan);
    EXPECT_LE(plan.arena_bytes, peak_bound);
  }
}

TEST(MemoryPlan, DisjointLifetimesShareBytes) {
  const std::vector<BufferRequest> reqs = {{1000, 0, 1}, {1000, 2, 3}, {1000, 4, 5}};
  const MemoryPlan plan = plan_memory(reqs);
  expect_valid(reqs, plan);
  EXPECT_EQ(plan.arena_bytes, 1024);
  EXPECT_EQ(plan.offsets[0], plan.offsets[1]);
}

TEST(MemoryPlan, RefusesBadRequests) {
  EXPECT_THROW(plan_memory({{10, 3, 2}}), CompileError);
  EXPECT_THROW(plan_memory({{10, 0, 0}}, 48), CompileError);
  EXPECT_EQ(plan_memory({}).arena_bytes, 0);
}
