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

// Where a group's float32 tiles need no copy (run_tile_program decides it
// per run, from the operands' memory):
// - a contiguous float32 load is read where it lies;
// - the instruction that computes a contiguous float32 store's tile writes it
//   straight into the output, and the store is skipped.
// A load is read in place when no store overlaps its memory, or when no store
// comes between the load and the slot's last read (a program that writes over
// its own input then still reads the values the input had at the load). A
// result goes straight to its output when that output overlaps no other
// operand, so no load or store sees it earlier than before.
struct CopyPlan {
  std::vector<bool> load_in_place;     // per instruction
  std::vector<int32_t> result_into;    // per instruction: the operand it writes, or -1
  std::vector<bool> skip;              // per instruction: a store already done
};

// The bytes operand o spans over the iteration space.
std::pair<uintptr_t, uintptr_t> extent(const TileProgram& p, const std::vector<void*>& data, size_t o) {
  const TileOperand& op = p.operands[o];
  const int64_t size = dtype_size(op.dtype);
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < p.shape.size(); ++d) {
    const int64_t span = (p.shape[d] - 1) * op.strides[d];
    (span < 0 ? lo : hi) += span;
  }
  const auto base = reinterpret_cast<uintptr_t>(data[o]);
  return {base + lo * size, base + (hi + 1) * size};
}

CopyPlan plan_copies(const TileProgram& p, const std::vector<void*>& data) {
  const size_t n = p.instrs.size(), last_dim = p.shape.size() - 1;
  CopyPlan plan{std::vector<bool>(n, false), std::vector<int32_t>(n, -1), std::vector<bool>(n, false)};
  std::vector<std::pair<uintptr_t, uintptr_t>> extents(p.operands.size());
  for (size_t o = 0; o < extents.size(); ++o) extents[o] = extent(p, data, o);
  std::vector<bool> written(p.operands.size(), false);
  for (const TileInstr& in : p.instrs) if (in.op == TileOp::kStore) written[in.operand] = true;
  if (p.reduce_operand >= 0) written[p.reduce_operand] = true;
  auto overlaps = [&](size_t o, bool only_written) {
    for (size_t q = 0; q < extents.size(); ++q) {
      if (q == o || (only_written && !written[q])) continue;
      if (extents[q].first < extents[o].second && extents[o].first < extents[q].second) return true;
    }
    return false;
  };
  auto plain_float = [&](int32_t o) {
    return p.operands[o].dtype == DType::kFloat32 && p.operands[o].strides[last_dim] == 1;
  };
  std::vector<int32_t> producer(static_cast<size_t>(std::max(p.num_slots, 0)), -1);
  for (size_t i = 0; i < n; ++i) {
    const TileInstr& in = p.instrs[i];
    if (in.op != TileOp::kStore && in.op != TileOp::kReduce) producer[in.dst] = static_cast<int32_t>(i);
    if (in.op == TileOp::kLoad && plain_float(in.operand)) {
      bool safe = !written[in.operand] && !overlaps(in.operand, /*only_written=*/true);
      if (!safe) {
        safe = true;
        bool store_seen = false;
        for (size_t j = i + 1; j < n; ++j) {
          const TileInstr& later = p.instrs[j];
          if (reads_slot(later, in.dst) && store_seen) {
            safe = false;
            break;
          }
          if (later.op == TileOp::kStore) store_seen = true;
          if (later.op != TileOp::kStore && later.op != TileOp::kReduce && later.dst == in.dst) break;
        }
      }
      plan.load_in_place[i] = safe;
    }
    if (in.op == TileOp::kStore && plain_float(in.operand) && !overlaps(in.operand, /*only_written=*/false)) {
      const int32_t from = producer[in.a];
      if (from >= 0 && !plan.load_in_place[from] && plan.result_into[from] < 0) {
        plan.result_into[from] = in.operand;
        plan.skip[i] = true;
      }
    }
  }
  return plan;
}

class TileRunner {
 public:
  TileRunner(const TileProgram& p, const std::vector<void*>& data, const CopyPlan& plan)
      : p_(p), data_(data), plan_(plan), prims_(detail::primitives()),
        tile_(tile_elements(p)),
        slots_(static_cast<size_t>(std::max<int32_t>(p.num_slots, 1)) * tile_),
        reads_(static_cast<size_t>(std::max<int32_t>(p.num_slots, 1))),
        offsets_(p.operands.size()), element_bytes_(p.operands.size()) {
    for (size_t o = 0; o < element_bytes_.size(); ++o) element_bytes_[o] = dtype_size(p.operands[o].dtype);
  }

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
    for (size_t i = 0; i < p_.instrs.size(); ++i) {
      const TileInstr& in = p_.instrs[i];
      switch (in.op) {
        case TileOp::kLoad: {
          const TileOperand& op = p_.operands[in.operand];
          const int64_t stride = op.strides[last];
          void* src = element(in.operand, offsets_[in.operand] + c0 * stride);
          if (plan_.load_in_place[i]) {
            reads_[in.dst] = static_cast<const float*>(src);
          } else if (stride == 0) {
            // One element broadcast along the row (a 0-dim tensor: an
            // optimizer's bias correction): converted once, then filled.
            float value;
            prims_.load(op.dtype, src, 1, &value, 1);
            prims_.fill(value, result(i, c0), n);
          } else {
            prims_.load(op.dtype, src, stride, result(i, c0), n);
          }
          break;
        }
        case TileOp::kStore: {
          if (plan_.skip[i]) break;
          const TileOperand& op = p_.operands[in.operand];
          const int64_t stride = op.strides[last];
          prims_.store(op.dtype, read(in.a), element(in.operand, offsets_[in.operand] + c0 * stride), stride, n);
          break;
        }
        case TileOp::kConst: prims_.fill(in.imm, result(i, c0), n); break;
        case TileOp::kWhere: {
          const float *c = read(in.c), *a = read(in.a), *b = read(in.b);
          prims_.where(c, a, b, result(i, c0), n);
          break;
        }
        case TileOp::kReduce:
          if (p_.reduce == ReduceKind::kMax) {
            const float m = prims_.max(read(in.a), n);
            if (std::isnan(m) || m > max_acc_) max_acc_ = std::isnan(max_acc_) ? max_acc_ : m;
          } else {
            sum_acc_ += prims_.sum(read(in.a), n);
          }
          break;
        default:
          if (in.op >= TileOp::kAdd) {
            const float *a = read(in.a), *b = read(in.b);
            prims_.binary(in.op, a, b, result(i, c0), n);
          } else {
            const float* a = read(in.a);
            prims_.unary(in.op, in.dtype, a, result(i, c0), n);
          }
      }
    }
  }

  void reduce_row(int64_t inner) {
    sum_acc_ = 0;
    max_acc_ = -std::numeric_limits<float>::infinity();
    for (int64_t c0 = 0; c0 < inner; c0 += tile_) run_chunk(c0, std::min(tile_, inner - c0));
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
  // What slot s holds: its own tile, or the operand's memory after a load in
  // place.
  const float* read(int32_t s) const { return reads_[s]; }
  // Where instruction i writes its result slot: the slot's own tile, or the
  // output it is stored to.
  float* result(size_t i, int64_t c0) {
    const int32_t s = p_.instrs[i].dst, o = plan_.result_into[i];
    float* tile = o >= 0 ? static_cast<float*>(element(o, offsets_[o] + c0))
                         : slots_.data() + static_cast<size_t>(s) * tile_;
    reads_[s] = tile;
    return tile;
  }
  void* element(int32_t operand, int64_t index) const {
    return static_cast<char*>(data_[operand]) + index * element_bytes_[operand];
  }

  const TileProgram& p_;
  const std::vector<void*>& data_;
  const CopyPlan& plan_;
  const detail::Primitives& prims_;
  const int64_t tile_;
  std::vector<float> slots_;
  std::vector<const float*> reads_;
  std::vector<int64_t> offsets_;
  std::vector<int64_t> element_bytes_;
  double sum_acc_ = 0;
  float max_acc_ = 0;
};

}  // namespace

int64_t tile_elements(const TileProgram& program) {
  constexpr int64_t kSlotBytes = 256 * 1024;
  int64_t tile = 1024;
  while (tile > 256 && std::max<int64_t>(program.num_slots, 1) * tile * 4 > kSlotBytes) tile /= 2;
  return tile;
}

void run_tile_program(const TileProgram& p, const std::vector<void*>& data,
                      const neuronkernels::ParallelFor& parallel_for) {
  if (data.size() != p.operands.size()) throw CompileError("tile program: operand pointers do not match its operands");
  const int64_t inner = p.shape.back();
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < p.shape.size(); ++d) rows *= p.shape[d];
  const bool reducing = p.reduce != ReduceKind::kNone;
  if (rows == 0 || (inner == 0 && !reducing)) return;
  const int64_t tile = tile_elements(p);
  const int64_t chunks = reducing ? 1 : (inner + tile - 1) / tile;
  const int64_t items = rows * chunks;
  const CopyPlan plan = plan_copies(p, data);
  auto body = [&](int64_t begin, int64_t end) {
    TileRunner runner(p, data, plan);
    int64_t current_row = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / chunks;
      if (row != current_row) runner.seek_row(row);
      current_row = row;
      if (reducing) {
        runner.reduce_row(inner);
      } else {
        const int64_t c0 = (item % chunks) * tile;
        runner.run_chunk(c0, std::min(tile, inner - c0));
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
