// Which graph nodes the tile interpreter runs, and the tile instructions of
// each: the pointwise ATen ops (arithmetic, activations, comparisons, where,
// casts and copies, the activations' backwards) and the reductions over the
// last dimension that may close a fused group (sum, mean, amax).
#pragma once

#include <functional>
#include <optional>

#include "neuroncompiler/ir.hpp"
#include "neuroncompiler/tile_program.hpp"

namespace neuroncompiler {

// A pointwise node whose dtypes and arguments the interpreter takes
// (kCopyInto included). Everything else runs as a node of its own.
bool is_pointwise(const Graph& graph, const Node& node);

struct LastDimReduction {
  ReduceKind kind;
  int32_t input;  // the reduced value
};
// sum.dim_IntList / mean.dim / amax over exactly the last dimension of a
// floating value.
std::optional<LastDimReduction> as_last_dim_reduction(const Graph& graph, const Node& node);

// What emit_pointwise needs from the group being lowered.
struct TileEmitter {
  std::function<int32_t(const Arg&)> operand;  // slot of a tensor or scalar argument
  std::function<int32_t(TileOp, int32_t a, int32_t b, int32_t c)> op;
  std::function<int32_t(float)> constant;
};

// Emits a pointwise node's instructions; returns the slot of its result
// (computed in float32, before rounding to the output dtype).
int32_t emit_pointwise(const Graph& graph, const Node& node, const TileEmitter& emit);

}  // namespace neuroncompiler
