// The tile interpreter: runs a fused group (TileProgram) over tiles of
// kTileElements elements of the iteration space's last dimension, each
// instruction one call of a precompiled vectorized primitive over the tile
// (no code generation at run time). With a few dozen slots of 256 floats a
// group's tiles stay in L1.
#pragma once

#include <vector>

#include "neuroncompiler/tile_program.hpp"
#include "neuronkernels/types.hpp"

namespace neuroncompiler {

inline constexpr int64_t kTileElements = 256;

// operand_data[o] points at element 0 of operand o (its buffer plus its
// offset). Rows of the iteration space are split over `parallel_for` when the
// group is large enough to pay for it.
void run_tile_program(const TileProgram& program, const std::vector<void*>& operand_data,
                      const neuronkernels::ParallelFor& parallel_for = neuronkernels::serial_for);

}  // namespace neuroncompiler
