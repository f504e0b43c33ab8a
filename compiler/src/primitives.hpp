// The tile interpreter's vectorized primitives over float32 tiles: loads and
// stores with conversion from and to every storable dtype, and the ops of
// TileOp. src/primitives_impl.cpp is compiled once per instruction-set level
// of the kernels (kernels/CMakeLists.txt's mechanism: baseline translation
// units with the level's instructions only inside the ISA region, namespace
// neuroncompiler::isa_<level>); primitives() picks the table of the level in
// force (neuronkernels::isa(): the CPU's best or TORCHNEURON_ISA).
#pragma once

#include <cstdint>

#include "neuroncompiler/dtype.hpp"
#include "neuroncompiler/tile_program.hpp"

namespace neuroncompiler::detail {

// An operand of a binary primitive: a float32 tile, one value for every
// element, or contiguous bfloat16 memory (read where it lies).
struct BinaryOperand {
  enum class Kind : uint8_t { kTile, kScalar, kBFloat16 };
  Kind kind = Kind::kTile;
  const void* data = nullptr;  // kTile, kBFloat16
  float value = 0;             // kScalar
};

struct Primitives {
  // dst[i] = float(src[i * stride]) (stride in elements; 0 broadcasts)
  void (*load)(DType dtype, const void* src, int64_t stride, float* dst, int64_t n);
  // dst[i * stride] = convert(src[i])
  void (*store)(DType dtype, const float* src, void* dst, int64_t stride, int64_t n);
  // load and store of `rows` rows of n elements: row r at dst + r * n (at
  // src + r * n), and in memory at base + offsets[r * offsets_step] elements.
  void (*load_rows)(DType dtype, const void* base, const int64_t* offsets, int64_t offsets_step, int64_t rows,
                    int64_t stride, float* dst, int64_t n);
  void (*store_rows)(DType dtype, const float* src, void* base, const int64_t* offsets, int64_t offsets_step,
                     int64_t rows, int64_t stride, int64_t n);
  void (*fill)(float value, float* dst, int64_t n);
  // Unary ops of TileOp; kRoundTo rounds to `dtype` (16-bit floats, ints,
  // bool); round_bf16 rounds the other ops' results to bfloat16 in the same
  // pass.
  void (*unary)(TileOp op, DType dtype, const float* a, bool round_bf16, float* dst, int64_t n);
  // dst[i] = op(a[i], b[i]) for the binary ops of TileOp; round_bf16 rounds
  // each result to bfloat16 (and back) in the same pass.
  void (*binary)(TileOp op, const BinaryOperand& a, const BinaryOperand& b, bool round_bf16, float* dst,
                 int64_t n);
  void (*where)(const float* cond, const float* a, const float* b, float* dst, int64_t n);
  double (*sum)(const float* a, int64_t n);
  float (*max)(const float* a, int64_t n);
};

const Primitives& primitives();

// The binary ops that read a bfloat16 operand where it lies within their own
// loop: the arithmetic a group's loads feed most. The others take it widened
// into a buffer first.
inline bool reads_bfloat16_in_its_loop(TileOp op) {
  return op == TileOp::kAdd || op == TileOp::kSub || op == TileOp::kMul || op == TileOp::kDiv;
}

}  // namespace neuroncompiler::detail
