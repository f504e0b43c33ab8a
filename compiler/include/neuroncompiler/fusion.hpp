// Elementwise fusion: chains of pointwise nodes over one iteration shape
// (broadcast inputs and casts included), optionally closed by a reduction
// over the last dimension, become fused groups; every other node is a step
// of its own. The schedule orders the steps so that each runs after the
// producers of what it reads, and says which values must be materialized
// (written to memory) rather than kept in the group's tiles.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

struct FusedGroup {
  std::vector<size_t> nodes;      // graph node indices, in order
  std::vector<int64_t> shape;     // iteration space (the members' output sizes)
  bool reduces = false;           // the last member is a last-dim reduction
};

struct ScheduledStep {
  enum class Kind : uint8_t { kFused, kNode };
  Kind kind = Kind::kNode;
  int32_t group = -1;  // kFused: index into Schedule::groups
  size_t node = 0;     // kNode: the graph node
};

struct Schedule {
  std::vector<FusedGroup> groups;
  std::vector<ScheduledStep> steps;
  std::vector<bool> materialized;  // per value: needs a buffer
};

Schedule fuse(const Graph& graph);

// A readable listing of the schedule (each step: a group and its member nodes,
// or a node of its own), for the debug dump of the IR after fusion.
std::string describe_schedule(const Graph& graph, const Schedule& schedule);

}  // namespace neuroncompiler
