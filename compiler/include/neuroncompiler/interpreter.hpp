// The tile interpreter: runs a fused group (TileProgram) over tiles of the
// iteration space's last dimension, each instruction one call of a
// precompiled vectorized primitive over the tile (no code generation at run
// time). Rows of up to 512 elements share a tile (as many as fit): loads and
// stores go row by row, the other instructions once per tile, and a
// reduction keeps one result per row. Attention's [B, H, S, 64] read in a
// transposed order, or a head's RMSNorm, then pay the interpreter's work per
// instruction once per tile instead of once per row of 64.
#pragma once

#include <vector>

#include "neuroncompiler/tile_program.hpp"
#include "neuronkernels/types.hpp"

namespace neuroncompiler {

// Elements per tile for a run whose values need `tiles` float32 tiles at once
// (values share tiles once dead, and operands read or written in place need
// none): 4096 while those fit in 128 KiB, fewer for more, never below 256.
// Longer tiles spread each instruction's call, and the interpreter's work
// between calls, over more elements: a fused a * b over rows of 3072 ran 1.2x
// faster with 4096 than with 1024, an AdamW update 1.1-1.3x.
int64_t tile_elements(int32_t tiles);

// operand_data[o] points at element 0 of operand o (its buffer plus its
// offset). Rows of the iteration space are split over `parallel_for` when the
// group is large enough to pay for it.
void run_tile_program(const TileProgram& program, const std::vector<void*>& operand_data,
                      const neuronkernels::ParallelFor& parallel_for = neuronkernels::serial_for);

}  // namespace neuroncompiler
