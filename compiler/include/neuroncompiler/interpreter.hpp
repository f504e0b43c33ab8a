// The tile interpreter: runs a fused group (TileProgram) over tiles of the
// iteration space's last dimension, each instruction one call of a
// precompiled vectorized primitive over the tile (no code generation at run
// time).
#pragma once

#include <vector>

#include "neuroncompiler/tile_program.hpp"
#include "neuronkernels/types.hpp"

namespace neuroncompiler {

// Elements per tile: 1024 while the group's slots fit in 256 KiB (L2), fewer
// for groups with more slots, never below 256. Longer tiles spread each
// instruction's call over more elements (bfloat16 groups, which load and store
// through slots, ran 15-20% faster with 1024 than with 256).
int64_t tile_elements(const TileProgram& program);

// operand_data[o] points at element 0 of operand o (its buffer plus its
// offset). Rows of the iteration space are split over `parallel_for` when the
// group is large enough to pay for it.
void run_tile_program(const TileProgram& program, const std::vector<void*>& operand_data,
                      const neuronkernels::ParallelFor& parallel_for = neuronkernels::serial_for);

}  // namespace neuroncompiler
