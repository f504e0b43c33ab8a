#include "neuroncompiler/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "neuroncompiler/ir.hpp"
#include "primitives.hpp"

namespace neuroncompiler {
namespace {

// Below this many elements a group runs on the calling thread.
constexpr int64_t kParallelElements = 32 * 1024;

class TileRunner {
 public:
  TileRunner(const TileProgram& p, const std::vector<void*>& data)
      : p_(p), data_(data), prims_(detail::primitives()),
        slots_(static_cast<size_t>(std::max<int32_t>(p.num_slots, 1)) * kTileElements),
        offsets_(p.operands.size()) {}

  // Row `row` of the leading dimensions, elements [c0, c0 + n) of the last.
  void seek_row(int64_t row) {
    const size_t last = p_.shape.size() - 1;
    std::fill(offsets_.begin(), offsets_.end(), 0);
    for (size_t d = last; d-- > 0;) {
      const int64_t idx = row % p_.shape[d];
      row /= p_.shape[d];
      for (size_t o = 0; o < offsets_.size(); ++o) offsets_[o] += idx * p_.operands[o].strides[d];
    }
  }

  void run_chunk(int64_t c0, int64_t n) {
    const size_t last = p_.shape.size() - 1;
    for (const TileInstr& in : p_.instrs) {
      switch (in.op) {
        case TileOp::kLoad: {
          const TileOperand& op = p_.operands[in.operand];
          const int64_t stride = op.strides[last];
          prims_.load(op.dtype, element(in.operand, offsets_[in.operand] + c0 * stride), stride, slot(in.dst), n);
          break;
        }
        case TileOp::kStore: {
          const TileOperand& op = p_.operands[in.operand];
          const int64_t stride = op.strides[last];
          prims_.store(op.dtype, slot(in.a), element(in.operand, offsets_[in.operand] + c0 * stride), stride, n);
          break;
        }
        case TileOp::kConst: prims_.fill(in.imm, slot(in.dst), n); break;
        case TileOp::kWhere: prims_.where(slot(in.c), slot(in.a), slot(in.b), slot(in.dst), n); break;
        case TileOp::kReduce:
          if (p_.reduce == ReduceKind::kMax) {
            const float m = prims_.max(slot(in.a), n);
            if (std::isnan(m) || m > max_acc_) max_acc_ = std::isnan(max_acc_) ? max_acc_ : m;
          } else {
            sum_acc_ += prims_.sum(slot(in.a), n);
          }
          break;
        default:
          if (in.op >= TileOp::kAdd) {
            prims_.binary(in.op, slot(in.a), slot(in.b), slot(in.dst), n);
          } else {
            prims_.unary(in.op, in.dtype, slot(in.a), slot(in.dst), n);
          }
      }
    }
  }

  void reduce_row(int64_t inner) {
    sum_acc_ = 0;
    max_acc_ = -std::numeric_limits<float>::infinity();
    for (int64_t c0 = 0; c0 < inner; c0 += kTileElements) run_chunk(c0, std::min(kTileElements, inner - c0));
    float result = 0;
    switch (p_.reduce) {
      case ReduceKind::kSum: result = static_cast<float>(sum_acc_); break;
      case ReduceKind::kMean: result = static_cast<float>(sum_acc_ / static_cast<double>(inner)); break;
      case ReduceKind::kMax: result = max_acc_; break;
      case ReduceKind::kNone: break;
    }
    const TileOperand& out = p_.operands[p_.reduce_operand];
    prims_.store(out.dtype, &result, element(p_.reduce_operand, offsets_[p_.reduce_operand]), 1, 1);
  }

 private:
  float* slot(int32_t s) { return slots_.data() + static_cast<size_t>(s) * kTileElements; }
  void* element(int32_t operand, int64_t index) const {
    return static_cast<char*>(data_[operand]) + index * dtype_size(p_.operands[operand].dtype);
  }

  const TileProgram& p_;
  const std::vector<void*>& data_;
  const detail::Primitives& prims_;
  std::vector<float> slots_;
  std::vector<int64_t> offsets_;
  double sum_acc_ = 0;
  float max_acc_ = 0;
};

}  // namespace

void run_tile_program(const TileProgram& p, const std::vector<void*>& data,
                      const neuronkernels::ParallelFor& parallel_for) {
  if (data.size() != p.operands.size()) throw CompileError("tile program: operand pointers do not match its operands");
  const int64_t inner = p.shape.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < p.shape.size(); ++d) rows *= p.shape[d];
  const bool reducing = p.reduce != ReduceKind::kNone;
  if (rows == 0 || (inner == 0 && !reducing)) return;
  const int64_t chunks = reducing ? 1 : (inner + kTileElements - 1) / kTileElements;
  const int64_t items = rows * chunks;
  auto body = [&](int64_t begin, int64_t end) {
    TileRunner runner(p, data);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / chunks;
      runner.seek_row(row);
      if (reducing) {
        runner.reduce_row(inner);
      } else {
        const int64_t c0 = (item % chunks) * kTileElements;
        runner.run_chunk(c0, std::min(kTileElements, inner - c0));
      }
    }
  };
  if (rows * std::max<int64_t>(inner, 1) < kParallelElements || items == 1) {
    body(0, items);
  } else {
    parallel_for(items, body);
  }
}

}  // namespace neuroncompiler
