#include "neuroncompiler/tile_lowering.hpp"

#include <algorithm>
#include <map>

#include "neuroncompiler/pointwise_ops.hpp"

namespace neuroncompiler {

std::vector<int64_t> broadcast_strides(const Layout& layout, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out(shape.size(), 0);
  const size_t rank = layout.sizes.size();
  if (rank > shape.size()) throw CompileError("tile lowering: a value of higher rank than its group");
  for (size_t k = 0; k < rank; ++k) {
    const size_t d = shape.size() - rank + k;
    if (layout.sizes[k] == shape[d]) out[d] = layout.strides[k];
    else if (layout.sizes[k] != 1) throw CompileError("tile lowering: a value does not broadcast to its group's shape");
  }
  return out;
}

// Without a reduction, iterates in the memory order of the group's first
// store (its smallest stride innermost) where that differs from the logical
// order: a cast of x.t() keeps x's strides, and in logical order each tile
// read and wrote one element per row of x (55 ms instead of 5 for a
// 32000 x 510 float32 result).
void order_dimensions(TileProgram& p) {
  if (p.reduce != ReduceKind::kNone || p.shape.size() < 2) return;
  int32_t store = -1;
  for (const TileInstr& in : p.instrs) {
    if (in.op == TileOp::kStore) {
      store = in.operand;
      break;
    }
  }
  if (store < 0) return;
  const std::vector<int64_t>& key = p.operands[store].strides;
  std::vector<size_t> order;
  for (size_t d = 0; d < p.shape.size(); ++d) {
    if (p.shape[d] != 1) order.push_back(d);  // size-1 dimensions go in collapse_dimensions
  }
  auto outer_first = [&](size_t a, size_t b) { return key[a] > key[b]; };
  if (std::is_sorted(order.begin(), order.end(), outer_first)) return;
  std::stable_sort(order.begin(), order.end(), outer_first);
  std::vector<int64_t> shape;
  for (size_t d : order) shape.push_back(p.shape[d]);
  for (TileOperand& o : p.operands) {
    std::vector<int64_t> strides;
    for (size_t d : order) strides.push_back(o.strides[d]);
    o.strides = std::move(strides);
  }
  p.shape = std::move(shape);
}

void collapse_dimensions(TileProgram& p) {
  for (int64_t s : p.shape) if (s == 0) return;  // nothing runs
  const bool keep_last = p.reduce != ReduceKind::kNone;
  const size_t rank = p.shape.size();
  std::vector<size_t> dims;
  for (size_t d = 0; d < rank; ++d) {
    if (p.shape[d] != 1 || (keep_last && d + 1 == rank)) dims.push_back(d);
  }
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides(p.operands.size());
  for (size_t k = 0; k < dims.size(); ++k) {
    const size_t d = dims[k];
    const bool last_kept = keep_last && d + 1 == rank;
    bool merge = !shape.empty() && !last_kept;
    for (size_t o = 0; merge && o < p.operands.size(); ++o) {
      merge = strides[o].back() == p.operands[o].strides[d] * p.shape[d];
    }
    if (merge) {
      shape.back() *= p.shape[d];
      for (size_t o = 0; o < p.operands.size(); ++o) strides[o].back() = p.operands[o].strides[d];
    } else {
      shape.push_back(p.shape[d]);
      for (size_t o = 0; o < p.operands.size(); ++o) strides[o].push_back(p.operands[o].strides[d]);
    }
  }
  if (shape.empty()) {
    shape.push_back(1);
    for (auto& st : strides) st.push_back(0);
  }
  p.shape = std::move(shape);
  for (size_t o = 0; o < p.operands.size(); ++o) p.operands[o].strides = std::move(strides[o]);
}

// A rounding to bfloat16 or float16 whose result only goes to stores of that
// dtype is dropped: the store's conversion rounds the same way, to the same
// bits (a rounded value converts exactly). Each such rounding was a pass over
// the tile for nothing (18% of a bfloat16 silu * mul group).
void drop_roundings_before_stores(TileProgram& p) {
  std::vector<TileInstr> kept;
  kept.reserve(p.instrs.size());
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const TileInstr& r = p.instrs[i];
    bool drop = r.op == TileOp::kRoundTo && (r.dtype == DType::kBFloat16 || r.dtype == DType::kFloat16);
    for (size_t j = i + 1; drop && j < p.instrs.size(); ++j) {
      const TileInstr& in = p.instrs[j];
      if (reads_slot(in, r.dst) && (in.op != TileOp::kStore || p.operands[in.operand].dtype != r.dtype)) drop = false;
    }
    if (!drop) {
      kept.push_back(r);
      continue;
    }
    for (size_t j = i + 1; j < p.instrs.size(); ++j) {
      if (p.instrs[j].op == TileOp::kStore && p.instrs[j].a == r.dst) p.instrs[j].a = r.a;
    }
  }
  p.instrs = std::move(kept);
}

TileProgram lower_group(const Graph& g, const Schedule& s, const FusedGroup& group) {
  TileProgram p;
  p.shape = group.shape.empty() ? std::vector<int64_t>{1} : group.shape;
  const bool scalar_space = group.shape.empty();
  std::map<int32_t, int32_t> slot_of;     // values computed in the group
  std::map<int32_t, int32_t> loaded;      // values loaded (by the id read, views included)
  // Slots whose values a 16-bit float type holds exactly (loaded from it or
  // rounded to it, or chosen among such values): rounding them to it again
  // changes nothing, so it is not emitted (a bfloat16 copy_ of a bfloat16
  // result rounded twice).
  std::map<int32_t, DType> exact_in;
  auto new_slot = [&] { return p.num_slots++; };
  auto add_operand = [&](int32_t value, const Layout& layout) {
    Layout l = layout;
    if (scalar_space && l.sizes.empty()) { l.sizes = {1}; l.strides = {0}; }
    p.operands.push_back({value, layout.dtype, broadcast_strides(l, p.shape)});
    return static_cast<int32_t>(p.operands.size() - 1);
  };
  TileEmitter emit;
  emit.constant = [&](float v) {
    TileInstr in;
    in.op = TileOp::kConst;
    in.dst = new_slot();
    in.imm = v;
    p.instrs.push_back(in);
    return in.dst;
  };
  emit.operand = [&](const Arg& a) -> int32_t {
    if (a.kind != Arg::Kind::kTensor) return emit.constant(static_cast<float>(a.scalar()));
    const int32_t id = static_cast<int32_t>(a.i);
    if (auto it = slot_of.find(id); it != slot_of.end()) return it->second;
    if (auto it = loaded.find(id); it != loaded.end()) return it->second;
    TileInstr in;
    in.op = TileOp::kLoad;
    in.operand = add_operand(id, g.value(id).layout);
    in.dst = new_slot();
    p.instrs.push_back(in);
    loaded[id] = in.dst;
    exact_in[in.dst] = p.operands[in.operand].dtype;
    return in.dst;
  };
  auto exact_dtype = [&](int32_t slot) {
    const auto it = exact_in.find(slot);
    return it == exact_in.end() ? DType::kFloat32 : it->second;
  };
  emit.op = [&](TileOp op, int32_t a, int32_t b, int32_t c) {
    TileInstr in;
    in.op = op;
    in.a = a;
    in.b = b;
    in.c = c;
    in.dst = new_slot();
    p.instrs.push_back(in);
    const bool selects = op == TileOp::kNeg || op == TileOp::kAbs || op == TileOp::kRelu ||
                         op == TileOp::kMax || op == TileOp::kMin || op == TileOp::kWhere;
    const bool picks_b_too = op == TileOp::kMax || op == TileOp::kMin || op == TileOp::kWhere;
    const DType d = exact_dtype(a);
    if (selects && d != DType::kFloat32 && (!picks_b_too || exact_dtype(b) == d)) {
      exact_in[in.dst] = d;
    }
    return in.dst;
  };
  auto store = [&](int32_t slot, int32_t value) {
    TileInstr in;
    in.op = TileOp::kStore;
    in.a = slot;
    in.operand = add_operand(value, g.value(value).layout);
    p.instrs.push_back(in);
  };

  for (size_t k = 0; k < group.nodes.size(); ++k) {
    const Node& n = g.nodes[group.nodes[k]];
    if (group.reduces && k + 1 == group.nodes.size()) {
      const auto red = as_last_dim_reduction(g, n);
      const int32_t src = emit.operand(n.args[0]);
      TileInstr in;
      in.op = TileOp::kReduce;
      in.a = src;
      p.instrs.push_back(in);
      p.reduce = red->kind;
      const Layout& out = g.value(n.outputs[0]).layout;
      std::vector<int64_t> strides(p.shape.size(), 0);
      for (size_t d = 0; d + 1 < p.shape.size(); ++d) strides[d] = out.strides[d];
      p.operands.push_back({n.outputs[0], out.dtype, strides});
      p.reduce_operand = static_cast<int32_t>(p.operands.size() - 1);
      continue;
    }
    int32_t result = emit_pointwise(g, n, emit);
    const bool copy_into = n.op == kCopyInto;
    const int32_t out = copy_into ? static_cast<int32_t>(n.args[0].i) : n.outputs[0];
    const DType dtype = g.value(out).layout.dtype;
    const bool is_16bit_float = dtype == DType::kBFloat16 || dtype == DType::kFloat16;
    if (dtype != DType::kFloat32 && !(is_16bit_float && exact_dtype(result) == dtype)) {
      // eager stores (and later reads) the rounded value
      TileInstr in;
      in.op = TileOp::kRoundTo;
      in.a = result;
      in.dtype = dtype;
      in.dst = new_slot();
      p.instrs.push_back(in);
      result = in.dst;
      if (is_16bit_float) exact_in[result] = dtype;
    }
    if (copy_into) {
      store(result, out);
      continue;
    }
    slot_of[out] = result;
    if (s.materialized[out]) store(result, out);
  }
  drop_roundings_before_stores(p);
  order_dimensions(p);
  collapse_dimensions(p);
  p.validate();
  return p;
}

}  // namespace neuroncompiler
