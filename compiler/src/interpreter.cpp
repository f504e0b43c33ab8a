#include "neuroncompiler/interpreter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "neuroncompiler/ir.hpp"
#include "primitives.hpp"

namespace neuroncompiler {
namespace {

// Below this many elements a group runs on the calling thread.
constexpr int64_t kParallelElements = 32 * 1024;
// Rows of at most this many elements share tiles; a group split over threads
// keeps at least kMinParallelItems tiles to share among them.
constexpr int64_t kMultiRowInner = 512;
constexpr int64_t kMinParallelItems = 16;

// Where a group's float32 tiles need no copy (run_tile_program decides it
// per run, from the operands' memory):
// - a contiguous float32 load is read where it lies;
// - the instruction that computes a contiguous float32 store's tile writes it
//   straight into the output, and the store is skipped.
// A load is read in place when no store overlaps its memory, or when no store
// comes between the load and the slot's last read (a program that writes over
// its own input then still reads the values the input had at the load). A
// result goes straight to its output when no load or store sees it earlier
// than before: the output overlaps no other operand, or only loads of the
// very same elements (same address and strides, so each element is read and
// written in its own chunk) whose values are all read by the time the result
// is computed. An in-place update (x.mul_(s)) then reads and writes x once.
struct CopyPlan {
  std::vector<bool> load_in_place;     // per instruction
  std::vector<int32_t> result_into;    // per instruction: the operand it writes, or -1
  // Per instruction: nothing left to do (a store already done, or a
  // rounding the instruction before it did).
  std::vector<bool> skip;
  // Per instruction (of an op that rounds_in_its_loop): it rounds its result
  // to bfloat16 itself and writes it where the rounding that follows it
  // would (that rounding is skipped): one pass instead of two.
  std::vector<bool> rounds_bf16;
  // Per instruction: its value when it is the same for every element: a
  // constant, or a load of one element broadcast over the whole iteration
  // space (a 0-dim tensor: an optimizer's step size) that nothing in the
  // program writes. Read once per run instead of once per chunk.
  std::vector<std::optional<float>> uniform;
  // Per binary instruction: which operand is a uniform value read as a
  // scalar (kNone, kB, or kA: op(value, a)), and its value. A uniform value
  // used only so needs no tile.
  enum class Scalar : uint8_t { kNone, kB, kA };
  std::vector<Scalar> scalar_operand;
  std::vector<float> scalar_value;
  // Per instruction: the tile it writes its result into (-1: none, it reads
  // or writes the operand's memory instead, or is a constant read as a
  // scalar only). Values share tiles once dead, so a group's live tiles stay
  // in L1: one tile per instruction put a 20-instruction group's 80 KiB of
  // tiles in L2, and every instruction then waited on L2 (an AdamW update ran
  // at 0.6x eager).
  std::vector<int32_t> tile;
  int32_t num_tiles = 0;
  // Per binary instruction: whether its a (bit 0) and b (bit 1) are
  // contiguous bfloat16 loads read where they lie (load_in_place, with every
  // reader an op that reads_bfloat16_in_its_loop): such a load needs no pass.
  std::vector<uint8_t> bfloat16_operands;
};

bool is_binary(TileOp op) { return op >= TileOp::kAdd && op < TileOp::kWhere; }
// Ops whose loop gains from rounding its result to bfloat16 in the same pass.
// Not the polynomials (exp, erf, tanh and the activations built on them) and
// the C library calls: with the rounding inside, their loops ran slower than
// the op and a separate rounding pass (exp 0.36 against 0.22 + 0.07 ns per
// element on one thread; a multiply 0.05 against 0.04 + 0.07).
bool rounds_in_its_loop(TileOp op) {
  switch (op) {
    case TileOp::kNeg: case TileOp::kAbs: case TileOp::kSqrt: case TileOp::kRsqrt: case TileOp::kRelu:
    case TileOp::kReciprocal: case TileOp::kLogicalNot:
      return true;
    case TileOp::kPow: case TileOp::kGeluBackward: case TileOp::kSiluBackward:
      return false;
    default:
      return is_binary(op);
  }
}
bool defines(const TileInstr& in) { return in.op != TileOp::kStore && in.op != TileOp::kReduce; }

// Calls visit(j) for each instruction j after i while the value instruction
// i defines is live (up to and including the instruction that writes its
// slot again); stops early when visit returns false.
template <typename F>
void while_live(const TileProgram& p, size_t i, F&& visit) {
  const int32_t slot = p.instrs[i].dst;
  for (size_t j = i + 1; j < p.instrs.size(); ++j) {
    if (!visit(j)) return;
    if (defines(p.instrs[j]) && p.instrs[j].dst == slot) return;
  }
}

// Calls f(slot) once for each slot `in` reads.
template <typename F>
void for_each_read(const TileInstr& in, F&& f) {
  if (in.op == TileOp::kLoad || in.op == TileOp::kConst) return;
  f(in.a);
  if (is_binary(in.op) || in.op == TileOp::kWhere) {
    if (in.b != in.a) f(in.b);
  }
  if (in.op == TileOp::kWhere && in.c != in.a && in.c != in.b) f(in.c);
}

// Finds the uniform operands of binary instructions; returns, per
// instruction, whether it is a uniform value some instruction reads as a tile.
std::vector<bool> plan_scalars(const TileProgram& p, CopyPlan& plan) {
  const size_t n = p.instrs.size();
  plan.scalar_operand.assign(n, CopyPlan::Scalar::kNone);
  plan.scalar_value.assign(n, 0.f);
  std::vector<bool> const_tile(n, false);
  std::vector<int32_t> producer(static_cast<size_t>(std::max(p.num_slots, 0)), -1);
  auto constant = [&](int32_t slot) {
    const int32_t from = producer[slot];
    return from >= 0 && plan.uniform[from] ? from : -1;
  };
  for (size_t i = 0; i < n; ++i) {
    const TileInstr& in = p.instrs[i];
    int32_t scalar_slot = -1;
    if (is_binary(in.op)) {
      if (const int32_t c = constant(in.b); c >= 0) {
        plan.scalar_operand[i] = CopyPlan::Scalar::kB;
        plan.scalar_value[i] = *plan.uniform[c];
        scalar_slot = in.b;
      } else if (const int32_t c2 = constant(in.a); c2 >= 0) {
        plan.scalar_operand[i] = CopyPlan::Scalar::kA;
        plan.scalar_value[i] = *plan.uniform[c2];
        scalar_slot = in.a;
      }
    }
    for_each_read(in, [&](int32_t slot) {
      if (slot == scalar_slot && in.a != in.b) return;
      if (const int32_t c = constant(slot); c >= 0) const_tile[c] = true;
    });
    if (defines(in)) producer[in.dst] = static_cast<int32_t>(i);
  }
  return const_tile;
}

// Gives each result that needs a tile one, reusing the tiles of values
// whose last read has passed (a result may take the tile of an operand it
// reads for the last time: every primitive reads element i before it writes
// element i). Constants are filled once, not per chunk, so theirs are never
// reused.
void assign_tiles(const TileProgram& p, const std::vector<bool>& const_tile, CopyPlan& plan) {
  const size_t n = p.instrs.size();
  const auto slots = static_cast<size_t>(std::max(p.num_slots, 0));
  plan.tile.assign(n, -1);
  // last_read[i]: the last instruction that reads the value instruction i
  // defines (-1: none). A slot written again holds a new value.
  std::vector<int64_t> last_read(n, -1), pending(slots, -1);
  for (size_t i = n; i-- > 0;) {
    const TileInstr& in = p.instrs[i];
    if (defines(in)) {
      last_read[i] = pending[in.dst];
      pending[in.dst] = -1;
    }
    for_each_read(in, [&](int32_t s) {
      if (pending[s] < 0) pending[s] = static_cast<int64_t>(i);
    });
  }
  plan.rounds_bf16.assign(n, false);
  for (size_t i = 0; i + 1 < n; ++i) {
    const TileInstr &in = p.instrs[i], &next = p.instrs[i + 1];
    if (rounds_in_its_loop(in.op) && next.op == TileOp::kRoundTo && next.dtype == DType::kBFloat16 &&
        next.a == in.dst && last_read[i] == static_cast<int64_t>(i + 1) && plan.result_into[i] < 0) {
      plan.rounds_bf16[i] = true;
      plan.skip[i + 1] = true;
    }
  }
  std::vector<int32_t> free_tiles, live_def(slots, -1);
  auto release = [&](int32_t def) {
    if (plan.tile[def] >= 0 && !plan.uniform[def]) free_tiles.push_back(plan.tile[def]);
  };
  for (size_t i = 0; i < n; ++i) {
    const TileInstr& in = p.instrs[i];
    for_each_read(in, [&](int32_t s) {
      if (live_def[s] >= 0 && last_read[live_def[s]] == static_cast<int64_t>(i)) {
        release(live_def[s]);
        live_def[s] = -1;
      }
    });
    if (!defines(in)) continue;
    const bool needs_tile = !plan.load_in_place[i] && plan.result_into[i] < 0 && !plan.rounds_bf16[i] &&
                            (!plan.uniform[i] || const_tile[i]);
    if (needs_tile && !plan.uniform[i] && !free_tiles.empty()) {
      plan.tile[i] = free_tiles.back();
      free_tiles.pop_back();
    } else if (needs_tile) {
      plan.tile[i] = plan.num_tiles++;
    }
    live_def[in.dst] = static_cast<int32_t>(i);
    if (last_read[i] < 0) {  // never read
      release(static_cast<int32_t>(i));
      live_def[in.dst] = -1;
    }
  }
}

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

// Whether operand o's rows follow one another in memory (the whole iteration
// space is one contiguous run of it), so a tile of several rows is one run.
bool rows_contiguous(const TileProgram& p, size_t o) {
  const std::vector<int64_t>& strides = p.operands[o].strides;
  int64_t expected = 1;
  for (size_t d = p.shape.size(); d-- > 0;) {
    if (p.shape[d] != 1 && strides[d] != expected) return false;
    expected *= p.shape[d];
  }
  return true;
}

// multi_row: tiles span several rows (seek_rows), so an operand read or
// written where it lies must have contiguous rows as well.
CopyPlan plan_copies(const TileProgram& p, const std::vector<void*>& data, bool multi_row) {
  const size_t n = p.instrs.size(), last_dim = p.shape.size() - 1;
  CopyPlan plan;
  plan.load_in_place.assign(n, false);
  plan.result_into.assign(n, -1);
  plan.skip.assign(n, false);
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
    return p.operands[o].dtype == DType::kFloat32 && p.operands[o].strides[last_dim] == 1 &&
           (!multi_row || rows_contiguous(p, static_cast<size_t>(o)));
  };
  plan.uniform.assign(n, std::nullopt);
  for (size_t i = 0; i < n; ++i) {
    const TileInstr& in = p.instrs[i];
    if (in.op == TileOp::kConst) plan.uniform[i] = in.imm;
    if (in.op != TileOp::kLoad) continue;
    const std::vector<int64_t>& strides = p.operands[in.operand].strides;
    if (p.numel() > 0 && std::all_of(strides.begin(), strides.end(), [](int64_t st) { return st == 0; }) &&
        !written[in.operand] && !overlaps(in.operand, /*only_written=*/true)) {
      float value;
      detail::primitives().load(p.operands[in.operand].dtype, data[in.operand], 1, &value, 1);
      plan.uniform[i] = value;
    }
  }
  // The last instruction reading a load's value (the load itself when it
  // copies into a tile): after it, the loaded memory may change.
  auto last_read_of_load = [&](size_t i) {
    if (!plan.load_in_place[i]) return i;
    size_t last = i;
    while_live(p, i, [&](size_t j) {
      if (reads_slot(p.instrs[j], p.instrs[i].dst)) last = j;
      return true;
    });
    return last;
  };
  // Whether instruction `from` may write its result straight into operand o.
  auto writes_early = [&](int32_t o, size_t from) {
    for (size_t q = 0; q < extents.size(); ++q) {
      if (!(extents[q].first < extents[o].second && extents[o].first < extents[q].second)) continue;
      if (q != static_cast<size_t>(o) &&
          (written[q] || data[q] != data[o] || p.operands[q].strides != p.operands[o].strides ||
           p.operands[q].dtype != p.operands[o].dtype)) {
        return false;
      }
      for (size_t j = 0; j < n; ++j) {
        const TileInstr& in = p.instrs[j];
        if (in.op == TileOp::kLoad && in.operand == static_cast<int32_t>(q) && (j > from || last_read_of_load(j) > from)) {
          return false;
        }
      }
    }
    return true;
  };
  // Whether load i may be read where it lies, when its readers read it.
  auto readable_in_place = [&](size_t i) {
    const TileInstr& in = p.instrs[i];
    if (!written[in.operand] && !overlaps(in.operand, /*only_written=*/true)) return true;
    bool safe = true, store_seen = false;
    while_live(p, i, [&](size_t j) {
      if (reads_slot(p.instrs[j], in.dst) && store_seen) return safe = false;
      store_seen = store_seen || p.instrs[j].op == TileOp::kStore;
      return true;
    });
    return safe;
  };
  // Whether every reader of load i's value reads it as a or b of an op that
  // reads_bfloat16_in_its_loop.
  auto read_by_arithmetic_only = [&](size_t i) {
    bool only = true;
    while_live(p, i, [&](size_t j) {
      const TileInstr& later = p.instrs[j];
      if (reads_slot(later, p.instrs[i].dst) && !detail::reads_bfloat16_in_its_loop(later.op)) return only = false;
      return true;
    });
    return only;
  };
  auto plain_bfloat16 = [&](int32_t o) {
    return p.operands[o].dtype == DType::kBFloat16 && p.operands[o].strides[last_dim] == 1 &&
           (!multi_row || rows_contiguous(p, static_cast<size_t>(o)));
  };
  plan.bfloat16_operands.assign(n, 0);
  std::vector<bool> bfloat16_load(n, false);
  std::vector<int32_t> producer(static_cast<size_t>(std::max(p.num_slots, 0)), -1);
  for (size_t i = 0; i < n; ++i) {
    const TileInstr& in = p.instrs[i];
    if (is_binary(in.op)) {
      const int32_t pa = producer[in.a], pb = producer[in.b];
      plan.bfloat16_operands[i] = static_cast<uint8_t>((pa >= 0 && bfloat16_load[pa] ? 1 : 0) |
                                                       (pb >= 0 && bfloat16_load[pb] ? 2 : 0));
    }
    if (in.op != TileOp::kStore && in.op != TileOp::kReduce) producer[in.dst] = static_cast<int32_t>(i);
    if (in.op == TileOp::kLoad && plain_float(in.operand)) plan.load_in_place[i] = readable_in_place(i);
    if (in.op == TileOp::kLoad && plain_bfloat16(in.operand) && !plan.uniform[i] && read_by_arithmetic_only(i) &&
        readable_in_place(i)) {
      plan.load_in_place[i] = true;
      bfloat16_load[i] = true;
    }
    if (in.op == TileOp::kStore && plain_float(in.operand)) {
      const int32_t from = producer[in.a];
      if (from >= 0 && !plan.load_in_place[from] && plan.result_into[from] < 0 && !plan.uniform[from] &&
          writes_early(in.operand, static_cast<size_t>(from))) {
        plan.result_into[from] = in.operand;
        plan.skip[i] = true;
      }
    }
  }
  assign_tiles(p, plan_scalars(p, plan), plan);
  return plan;
}

class TileRunner {
 public:
  TileRunner(const TileProgram& p, const std::vector<void*>& data, const CopyPlan& plan, int64_t tile_size)
      : p_(p), data_(data), plan_(plan), prims_(detail::primitives()),
        tile_(tile_size),
        tiles_(static_cast<size_t>(plan.num_tiles) * tile_),
        reads_(static_cast<size_t>(std::max<int32_t>(p.num_slots, 1))),
        offsets_(p.operands.size()), element_bytes_(p.operands.size()) {
    for (size_t o = 0; o < element_bytes_.size(); ++o) element_bytes_[o] = dtype_size(p.operands[o].dtype);
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      if (plan.uniform[i] && plan.tile[i] >= 0) prims_.fill(*plan.uniform[i], tile(i), tile_);
    }
  }

  // Row `row` of the leading dimensions, elements [c0, c0 + n) of the last.
  void seek_row(int64_t row) {
    rows_ = 1;
    seek_index(row);
  }

  // Rows [row, row + count) as one tile of count x inner elements: loads
  // and stores go row by row, every other instruction runs once over the
  // tile. A group over short rows (attention's [B, H, S, 64] read in a
  // transposed order) then pays the interpreter's work per instruction once
  // per tile, not once per row of 64.
  void seek_rows(int64_t row, int64_t count) {
    rows_ = count;
    const size_t ops = offsets_.size(), leading = p_.shape.size() - 1;
    if (many_offsets_.size() < static_cast<size_t>(count) * ops) many_offsets_.resize(static_cast<size_t>(count) * ops);
    // The first row by division, the others by counting on from it.
    seek_index(row);
    int64_t* out = many_offsets_.data();
    std::copy(offsets_.begin(), offsets_.end(), out);
    for (int64_t r = 1; r < count; ++r, out += ops) {
      std::copy(out, out + ops, out + ops);
      for (size_t d = leading; d-- > 0;) {
        if (++index_[d] < p_.shape[d]) {
          for (size_t o = 0; o < ops; ++o) out[ops + o] += p_.operands[o].strides[d];
          break;
        }
        index_[d] = 0;
        for (size_t o = 0; o < ops; ++o) out[ops + o] -= (p_.shape[d] - 1) * p_.operands[o].strides[d];
      }
    }
  }

  void run_chunk(int64_t c0, int64_t n) {
    const size_t last = p_.shape.size() - 1;
    const int64_t row_n = n;  // elements of each row of the tile
    n *= rows_;
    for (size_t i = 0; i < p_.instrs.size(); ++i) {
      const TileInstr& in = p_.instrs[i];
      if (plan_.skip[i]) continue;
      switch (in.op) {
        case TileOp::kConst:
          if (plan_.tile[i] >= 0) reads_[in.dst] = tile(i);  // filled once, in the constructor
          break;
        case TileOp::kLoad: {
          if (plan_.uniform[i]) {
            if (plan_.tile[i] >= 0) reads_[in.dst] = tile(i);  // as a constant
            break;
          }
          const TileOperand& op = p_.operands[in.operand];
          const int64_t stride = op.strides[last];
          if (plan_.load_in_place[i]) {
            reads_[in.dst] = static_cast<const float*>(element(in.operand, offsets_[in.operand] + c0 * stride));
            break;
          }
          float* dst = result(i, c0);
          if (rows_ > 1 && stride != 0) {
            prims_.load_rows(op.dtype, element(in.operand, c0 * stride), many_offsets_.data() + in.operand,
                             static_cast<int64_t>(offsets_.size()), rows_, stride, dst, row_n);
            break;
          }
          for (int64_t r = 0; r < rows_; ++r) {
            void* src = element(in.operand, row_offset(r, in.operand) + c0 * stride);
            if (stride == 0) {
              // One element broadcast along the row (a value per row; one
              // for the whole space is uniform, above): converted once,
              // then filled.
              float value;
              prims_.load(op.dtype, src, 1, &value, 1);
              prims_.fill(value, dst + r * row_n, row_n);
            } else {
              prims_.load(op.dtype, src, stride, dst + r * row_n, row_n);
            }
          }
          break;
        }
        case TileOp::kStore: {
          const TileOperand& op = p_.operands[in.operand];
          const int64_t stride = op.strides[last];
          if (rows_ > 1) {
            prims_.store_rows(op.dtype, read(in.a), element(in.operand, c0 * stride), many_offsets_.data() + in.operand,
                              static_cast<int64_t>(offsets_.size()), rows_, stride, row_n);
          } else {
            prims_.store(op.dtype, read(in.a), element(in.operand, offsets_[in.operand] + c0 * stride), stride, n);
          }
          break;
        }
        case TileOp::kWhere: {
          const float *c = read(in.c), *a = read(in.a), *b = read(in.b);
          prims_.where(c, a, b, result(i, c0), n);
          break;
        }
        case TileOp::kReduce:
          // Each row of the tile into its own accumulator.
          for (int64_t r = 0; r < rows_; ++r) {
            const float* a = read(in.a) + r * row_n;
            if (p_.reduce == ReduceKind::kMax) {
              const float m = prims_.max(a, row_n);
              float& acc = max_acc_[static_cast<size_t>(r)];
              if (std::isnan(m) || m > acc) acc = std::isnan(acc) ? acc : m;
            } else {
              sum_acc_[static_cast<size_t>(r)] += prims_.sum(a, row_n);
            }
          }
          break;
        default:
          if (in.op >= TileOp::kAdd) {
            const bool round = plan_.rounds_bf16[i];
            const uint8_t bf16 = plan_.bfloat16_operands[i];
            using Kind = detail::BinaryOperand::Kind;
            detail::BinaryOperand a{(bf16 & 1) ? Kind::kBFloat16 : Kind::kTile, read(in.a), 0.f};
            detail::BinaryOperand b{(bf16 & 2) ? Kind::kBFloat16 : Kind::kTile, read(in.b), 0.f};
            const CopyPlan::Scalar scalar = plan_.scalar_operand[i];
            if (scalar != CopyPlan::Scalar::kNone) {
              (scalar == CopyPlan::Scalar::kA ? a : b) = {Kind::kScalar, nullptr, plan_.scalar_value[i]};
            }
            prims_.binary(in.op, a, b, round, result(round ? i + 1 : i, c0), n);
          } else {
            const bool round = plan_.rounds_bf16[i];
            prims_.unary(in.op, in.dtype, read(in.a), round, result(round ? i + 1 : i, c0), n);
          }
      }
    }
  }

  // The reduction of the current row (seek_row), chunk by chunk, or of each
  // row of the current tile of rows (seek_rows; inner fits a tile).
  void reduce_rows(int64_t inner) {
    const auto rows = static_cast<size_t>(rows_);
    sum_acc_.assign(rows, 0.0);
    max_acc_.assign(rows, -std::numeric_limits<float>::infinity());
    if (rows_ > 1) {
      run_chunk(0, inner);
    } else {
      for (int64_t c0 = 0; c0 < inner; c0 += tile_) run_chunk(c0, std::min(tile_, inner - c0));
    }
    const TileOperand& out = p_.operands[p_.reduce_operand];
    for (size_t r = 0; r < rows; ++r) {
      float result = 0;
      switch (p_.reduce) {
        case ReduceKind::kSum: result = static_cast<float>(sum_acc_[r]); break;
        case ReduceKind::kMean: result = static_cast<float>(sum_acc_[r] / static_cast<double>(inner)); break;
        case ReduceKind::kMax: result = max_acc_[r]; break;
        case ReduceKind::kNone: break;
      }
      prims_.store(out.dtype, &result,
                   element(p_.reduce_operand, row_offset(static_cast<int64_t>(r), p_.reduce_operand)), 1, 1);
    }
  }

 private:
  // index_ and offsets_ of row `row` of the leading dimensions.
  void seek_index(int64_t row) {
    const size_t leading = p_.shape.size() - 1;
    index_.assign(leading, 0);
    std::fill(offsets_.begin(), offsets_.end(), 0);
    for (size_t d = leading; d-- > 0;) {
      index_[d] = row % p_.shape[d];
      row /= p_.shape[d];
      for (size_t o = 0; o < offsets_.size(); ++o) offsets_[o] += index_[d] * p_.operands[o].strides[d];
    }
  }
  int64_t row_offset(int64_t r, int32_t operand) const {
    return r == 0 ? offsets_[operand] : many_offsets_[static_cast<size_t>(r) * offsets_.size() + operand];
  }

  // What slot s holds: its own tile, or the operand's memory after a load in
  // place.
  const float* read(int32_t s) const { return reads_[s]; }
  // Where instruction i writes its result slot: its tile, or the output it
  // is stored to.
  float* result(size_t i, int64_t c0) {
    const int32_t o = plan_.result_into[i];
    float* out = o >= 0 ? static_cast<float*>(element(o, offsets_[o] + c0)) : tile(i);
    reads_[p_.instrs[i].dst] = out;
    return out;
  }
  float* tile(size_t i) { return tiles_.data() + static_cast<size_t>(plan_.tile[i]) * tile_; }
  void* element(int32_t operand, int64_t index) const {
    return static_cast<char*>(data_[operand]) + index * element_bytes_[operand];
  }

  const TileProgram& p_;
  const std::vector<void*>& data_;
  const CopyPlan& plan_;
  const detail::Primitives& prims_;
  const int64_t tile_;
  std::vector<float> tiles_;
  std::vector<const float*> reads_;
  std::vector<int64_t> offsets_;       // of the tile's first row, per operand
  std::vector<int64_t> many_offsets_;  // of each row of a multi-row tile, row-major
  std::vector<int64_t> index_;         // the tile's first row's index in the leading dimensions
  int64_t rows_ = 1;                   // rows in the current tile
  std::vector<int64_t> element_bytes_;
  std::vector<double> sum_acc_;  // per row of the tile
  std::vector<float> max_acc_;
};

}  // namespace

int64_t tile_elements(int32_t tiles) {
  constexpr int64_t kTileBytes = 128 * 1024;
  int64_t tile = 4096;
  while (tile > 256 && std::max<int64_t>(tiles, 1) * tile * 4 > kTileBytes) tile /= 2;
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
  // Rows shorter than a tile share tiles (seek_rows).
  const bool multi_row = rows > 1 && inner > 0 && inner <= kMultiRowInner;
  const CopyPlan plan = plan_copies(p, data, multi_row);
  const int64_t tile = tile_elements(plan.num_tiles);
  const bool parallel = rows * std::max<int64_t>(inner, 1) >= kParallelElements;
  int64_t rows_per_tile = multi_row ? std::max<int64_t>(1, tile / inner) : 1;
  // Enough tiles to share among the threads.
  if (parallel) rows_per_tile = std::min(rows_per_tile, std::max<int64_t>(1, rows / kMinParallelItems));
  const int64_t chunks = reducing || rows_per_tile > 1 ? 1 : (inner + tile - 1) / tile;
  const int64_t row_blocks = (rows + rows_per_tile - 1) / rows_per_tile;
  const int64_t items = row_blocks * chunks;
  auto body = [&](int64_t begin, int64_t end) {
    TileRunner runner(p, data, plan, tile);
    int64_t current_row = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / chunks * rows_per_tile;
      if (rows_per_tile > 1) {
        runner.seek_rows(row, std::min(rows_per_tile, rows - row));
        if (reducing) {
          runner.reduce_rows(inner);
        } else {
          runner.run_chunk(0, inner);
        }
        continue;
      }
      if (row != current_row) runner.seek_row(row);
      current_row = row;
      if (reducing) {
        runner.reduce_rows(inner);
      } else {
        const int64_t c0 = (item % chunks) * tile;
        runner.run_chunk(c0, std::min(tile, inner - c0));
      }
    }
  };
  if (!parallel || items == 1) {
    body(0, items);
  } else {
    parallel_for(items, body);
  }
}

}  // namespace neuroncompiler
