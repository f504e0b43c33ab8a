#include "neuroncompiler/tile_program.hpp"

#include <string>

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

const char* tile_op_name(TileOp op) {
  static const char* const kNames[kNumTileOps] = {
      "load", "store", "const", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "relu", "sigmoid", "tanh",
      "silu", "gelu", "gelu_tanh", "reciprocal", "sin", "cos", "erf", "logical_not", "round_to",
      "add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge",
      "logical_and", "logical_or", "gelu_backward", "silu_backward", "where", "reduce"};
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumTileOps ? kNames[i] : "?";
}

bool reads_slot(const TileInstr& in, int32_t slot) {
  if (in.op == TileOp::kLoad || in.op == TileOp::kConst) return false;
  return in.a == slot || (in.op >= TileOp::kAdd && in.b == slot) || (in.op == TileOp::kWhere && in.c == slot);
}

int64_t TileProgram::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

void TileProgram::validate() const {
  auto fail = [](const std::string& what) { throw CompileError("tile program: " + what); };
  if (shape.empty()) fail("empty iteration space");
  for (int64_t s : shape) if (s < 0) fail("negative size");
  for (size_t o = 0; o < operands.size(); ++o) {
    if (operands[o].strides.size() != shape.size()) fail("operand " + std::to_string(o) + " has the wrong rank");
    if (!is_tile_storable(operands[o].dtype)) {
      fail("operand " + std::to_string(o) + " has dtype " + std::string(dtype_name(operands[o].dtype)));
    }
  }
  std::vector<bool> set(static_cast<size_t>(num_slots), false);
  auto src = [&](int32_t s, size_t i) {
    if (s < 0 || s >= num_slots || !set[s]) fail("instruction " + std::to_string(i) + " reads slot " + std::to_string(s) + " before it is set");
  };
  int reductions = 0;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const TileInstr& in = instrs[i];
    const int op = static_cast<int>(in.op);
    if (op < 0 || op >= kNumTileOps) fail("instruction " + std::to_string(i) + ": unknown op");
    if (in.op == TileOp::kLoad || in.op == TileOp::kStore) {
      if (in.operand < 0 || in.operand >= static_cast<int32_t>(operands.size())) fail("instruction " + std::to_string(i) + ": bad operand");
    }
    if (in.op == TileOp::kStore || in.op == TileOp::kReduce) {
      src(in.a, i);
      if (in.op == TileOp::kReduce) ++reductions;
      continue;
    }
    if (in.op != TileOp::kLoad && in.op != TileOp::kConst) {
      src(in.a, i);
      if (in.op >= TileOp::kAdd) src(in.b, i);
      if (in.op == TileOp::kWhere) src(in.c, i);
    }
    if (in.dst < 0 || in.dst >= num_slots) fail("instruction " + std::to_string(i) + ": bad result slot");
    set[in.dst] = true;
  }
  if ((reduce != ReduceKind::kNone) != (reductions == 1)) fail("reduction kind and reduce instructions disagree");
  if (reduce != ReduceKind::kNone &&
      (reduce_operand < 0 || reduce_operand >= static_cast<int32_t>(operands.size()))) {
    fail("bad reduction operand");
  }
}

}  // namespace neuroncompiler
