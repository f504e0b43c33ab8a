// What the tile interpreter runs for one fused group: an iteration space, the
// operands it loads and stores (strided views over buffers; broadcast
// dimensions have stride 0) and a straight-line list of instructions over
// float32 tiles ("slots"). An optional trailing reduction folds the last
// dimension of the iteration space into one value per row.
#pragma once

#include <cstdint>
#include <vector>

#include "neuroncompiler/dtype.hpp"

namespace neuroncompiler {

enum class TileOp : uint8_t {
  // memory and constants
  kLoad, kStore, kConst,
  // unary
  kNeg, kAbs, kExp, kLog, kSqrt, kRsqrt, kRelu, kSigmoid, kTanh, kSilu, kGelu, kGeluTanh,
  kReciprocal, kSin, kCos, kErf, kLogicalNot, kRoundTo,
  // binary
  kAdd, kSub, kMul, kDiv, kMax, kMin, kPow, kEq, kNe, kLt, kLe, kGt, kGe, kLogicalAnd, kLogicalOr,
  kGeluBackward,  // a * GELU'(b): the exact GELU's backward of gradient a at input b
  kSiluBackward,  // a * SiLU'(b)
  // ternary: dst = c ? a : b  (operands a, b, c)
  kWhere,
  // trailing reduction of slot a over the last dimension
  kReduce,
};
constexpr int kNumTileOps = static_cast<int>(TileOp::kReduce) + 1;
const char* tile_op_name(TileOp op);

enum class ReduceKind : uint8_t { kNone, kSum, kMean, kMax };

struct TileOperand {
  int32_t value = -1;             // the graph value (for buffers and debugging)
  DType dtype = DType::kFloat32;
  std::vector<int64_t> strides;   // elements, one per iteration dimension
  bool operator==(const TileOperand&) const = default;
};

struct TileInstr {
  TileOp op = TileOp::kConst;
  int32_t dst = -1;       // result slot (-1 for kStore, kReduce)
  int32_t a = -1, b = -1, c = -1;  // source slots
  int32_t operand = -1;   // kLoad, kStore: index into operands
  float imm = 0;          // kConst
  DType dtype = DType::kFloat32;  // kRoundTo: the type to round to
  bool operator==(const TileInstr&) const = default;
};

// Whether `in` reads slot `slot` (as a, b or c; loads and constants read none).
bool reads_slot(const TileInstr& in, int32_t slot);

struct TileProgram {
  std::vector<int64_t> shape;  // iteration space (collapsed; at least one dimension)
  std::vector<TileOperand> operands;
  std::vector<TileInstr> instrs;
  int32_t num_slots = 0;
  ReduceKind reduce = ReduceKind::kNone;
  int32_t reduce_operand = -1;  // where each row's result goes (last stride unused)
  bool operator==(const TileProgram&) const = default;

  int64_t numel() const;
  // Checks slots, operands and strides; throws CompileError.
  void validate() const;
};

}  // namespace neuroncompiler
