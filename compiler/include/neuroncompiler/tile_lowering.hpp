// A fused group as a tile program: operands are the values the group reads
// from and writes to memory (broadcast to the group's iteration space), each
// member's instructions follow in order, values of 16-bit, integer or bool
// type are rounded where eager would store them, and the iteration space is
// collapsed to as few dimensions as the operands' strides allow.
#pragma once

#include "neuroncompiler/fusion.hpp"
#include "neuroncompiler/tile_program.hpp"

namespace neuroncompiler {

TileProgram lower_group(const Graph& graph, const Schedule& schedule, const FusedGroup& group);

// The strides of `layout` broadcast to `shape` (right-aligned; stride 0 where
// the layout has size 1 or no dimension).
std::vector<int64_t> broadcast_strides(const Layout& layout, const std::vector<int64_t>& shape);

// Drops size-1 dimensions and merges dimensions every operand walks as one
// (keeping the last one apart when the program reduces it).
void collapse_dimensions(TileProgram& program);

}  // namespace neuroncompiler
