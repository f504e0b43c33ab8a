#include "neuroncompiler/patterns.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "native_views.hpp"
#include "neuroncompiler/native_ops.hpp"
#include "neuroncompiler/pointwise_ops.hpp"
#include "pattern_graph.hpp"

namespace neuroncompiler {
namespace {

// ---- attention ------------------------------------------------------------

constexpr const char* kFusedAttention = "aten::_scaled_dot_product_fused_attention_overrideable.default";
constexpr const char* kFusedAttentionBackward =
    "aten::_scaled_dot_product_fused_attention_overrideable_backward.default";

bool attention_operands_ok(const PatternGraph& pg, const Node& n, size_t q, size_t mask) {
  const Graph& g = pg.graph();
  for (size_t i = q; i < q + 3; ++i) {
    if (!pg.is_tensor(n.args[i]) || g.value(pg.id(n.args[i])).layout.sizes.size() != 4) return false;
  }
  const Layout &ql = g.value(pg.id(n.args[q])).layout, &kl = g.value(pg.id(n.args[q + 1])).layout,
               &vl = g.value(pg.id(n.args[q + 2])).layout;
  if (!kernel_dtype(ql.dtype) || kl.dtype != ql.dtype || vl.dtype != ql.dtype) return false;
  const int64_t hkv = kl.sizes[1];
  if (hkv == 0 ? ql.sizes[1] != 0 : ql.sizes[1] % hkv != 0) return false;
  if (n.args[mask].kind == Arg::Kind::kNone) return true;
  if (!pg.is_tensor(n.args[mask])) return false;
  const Layout& ml = g.value(pg.id(n.args[mask])).layout;
  return kernel_dtype(ml.dtype) && pg.broadcasts_to(ml, {ql.sizes[0], ql.sizes[1], ql.sizes[2], kl.sizes[2]});
}

bool match_attention(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  if (n.op != kFusedAttention || n.args.size() != 8 || n.outputs.size() != 9) return false;
  if (!attention_operands_ok(pg, n, 0, 3) || n.args[4].scalar() != 0.0 || n.args[6].i != 0) return false;
  if (n.args[5].i != 0 && n.args[3].kind != Arg::Kind::kNone) return false;  // causal and a mask
  for (size_t o : {2, 3, 4, 5, 8}) if (n.outputs[o] >= 0) return false;
  if (n.outputs[1] >= 0 && pg.graph().value(n.outputs[1]).layout.dtype != DType::kFloat32) return false;
  Node native{std::string(kNativeAttention),
              {n.args[0], n.args[1], n.args[2], n.args[3], Arg::boolean(n.args[5].i != 0), n.args[7]},
              {n.outputs[0], n.outputs[1], n.outputs[6], n.outputs[7]}};
  pg.replace({i}, i, std::move(native));
  return true;
}

bool match_attention_backward(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  if (n.op != kFusedAttentionBackward || n.args.size() != 17 || n.outputs.size() != 4) return false;
  if (!attention_operands_ok(pg, n, 1, 4) || n.args[12].scalar() != 0.0) return false;
  if (n.outputs[3] >= 0) return false;  // the mask's gradient
  if (n.args[13].i != 0 && n.args[4].kind != Arg::Kind::kNone) return false;
  if (!pg.is_tensor(n.args[0]) || !pg.is_tensor(n.args[6]) || !pg.is_tensor(n.args[7])) return false;
  const Layout& lse = pg.graph().value(pg.id(n.args[7])).layout;
  if (lse.dtype != DType::kFloat32 || !lse.is_contiguous()) return false;
  Node native{std::string(kNativeAttentionBackward),
              {n.args[0], n.args[1], n.args[2], n.args[3], n.args[4], n.args[6], n.args[7],
               Arg::boolean(n.args[13].i != 0), n.args[16]},
              {n.outputs[0], n.outputs[1], n.outputs[2]}};
  pg.replace({i}, i, std::move(native));
  return true;
}

// ---- norms ----------------------------------------------------------------

// A per-column vector of `cols` elements (a norm's weight or bias).
bool is_column_vector(const Graph& g, const Arg& a, int64_t cols) {
  if (a.kind != Arg::Kind::kTensor) return false;
  const Layout& l = g.value(static_cast<int32_t>(a.i)).layout;
  return l.sizes.size() == 1 && l.sizes[0] == cols && (cols <= 1 || l.strides[0] == 1) && kernel_dtype(l.dtype);
}

bool match_layer_norm(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  const Graph& g = pg.graph();
  if (n.op != "aten::native_layer_norm.default" || n.args.size() != 5 || n.outputs.size() != 3) return false;
  if (!pg.is_tensor(n.args[0]) || n.outputs[0] < 0) return false;
  const Layout& x = g.value(pg.id(n.args[0])).layout;
  const Layout& y = g.value(n.outputs[0]).layout;
  const auto xr = as_rows(x), yr = as_rows(y);
  if (x.sizes.empty() || !xr || !yr || !kernel_dtype(x.dtype) || !kernel_dtype(y.dtype)) return false;
  if (n.args[1].kind != Arg::Kind::kIntList || n.args[1].ints != std::vector<int64_t>{x.sizes.back()}) return false;
  for (size_t a : {2, 3}) {
    if (n.args[a].kind != Arg::Kind::kNone && !is_column_vector(g, n.args[a], xr->cols)) return false;
  }
  for (size_t o : {1, 2}) {
    if (n.outputs[o] < 0) continue;
    const Layout& s = g.value(n.outputs[o]).layout;
    if (!s.is_contiguous() || s.numel() != xr->rows || !kernel_dtype(s.dtype)) return false;
  }
  if (n.outputs[1] >= 0 && n.outputs[2] >= 0 &&
      g.value(n.outputs[1]).layout.dtype != g.value(n.outputs[2]).layout.dtype) {
    return false;
  }
  Node native{std::string(kNativeRowNorm),
              {n.args[0], n.args[2], n.args[3], n.args[4], Arg::boolean(true), Arg::integer(-1)},
              {n.outputs[0], n.outputs[1], n.outputs[2]}};
  pg.replace({i}, i, std::move(native));
  return true;
}

bool is_last_dim(const Arg& dims, size_t rank) {
  return dims.kind == Arg::Kind::kIntList && dims.ints.size() == 1 &&
         (dims.ints[0] == -1 || dims.ints[0] == static_cast<int64_t>(rank) - 1);
}

// Hugging Face's RMSNorm, from its mean:
//   weight * (x * rsqrt(mean(x^2, -1, keepdim) + eps)).to(dtype)
// with x float32 (possibly a cast of a 16-bit input), the cast and the weight optional.
bool match_rms_norm(PatternGraph& pg, size_t mean_node) {
  const Graph& g = pg.graph();
  const Node& m = pg.node(mean_node);
  if (m.op != "aten::mean.dim" || m.args.size() != 4 || !pg.is_tensor(m.args[0])) return false;
  if (m.args[2].i == 0 || m.args[3].kind != Arg::Kind::kNone) return false;  // keepdim, no dtype
  const auto pow_node = pg.producer(pg.id(m.args[0]));
  if (!pow_node) return false;
  const Node& pw = pg.node(*pow_node);
  int32_t x = -1;
  if (pw.op == "aten::pow.Tensor_Scalar" && pg.is_tensor(pw.args[0]) && pw.args[1].is_scalar() && pw.args[1].scalar() == 2.0) {
    x = pg.id(pw.args[0]);
  } else if (pw.op == "aten::mul.Tensor" && pg.is_tensor(pw.args[0]) && pw.args[1] == pw.args[0]) {
    x = pg.id(pw.args[0]);
  } else {
    return false;
  }
  const Layout& xl = g.value(x).layout;
  const auto rows = as_rows(xl);
  if (xl.dtype != DType::kFloat32 || !rows || xl.sizes.empty() || !is_last_dim(m.args[1], xl.sizes.size())) return false;
  std::vector<size_t> nodes{*pow_node, mean_node};
  // mean + eps -> rsqrt -> x * r
  const auto add = pg.sole_reader(m.outputs[0]);
  if (!add) return false;
  const Node& an = pg.node(*add);
  const bool add_ok = (an.op == "aten::add.Tensor" || an.op == "aten::add.Scalar") && an.args.size() == 3 &&
                      pg.id(an.args[0]) == m.outputs[0] && an.args[1].is_scalar() && an.args[2].is_scalar() &&
                      an.args[2].scalar() == 1.0;
  if (!add_ok) return false;
  const double eps = an.args[1].scalar();
  const auto rs = pg.sole_reader(an.outputs[0]);
  if (!rs || pg.node(*rs).op != "aten::rsqrt.default") return false;
  const auto mul = pg.sole_reader(pg.node(*rs).outputs[0]);
  if (!mul) return false;
  const Node& mn = pg.node(*mul);
  const int32_t r = pg.node(*rs).outputs[0];
  if (mn.op != "aten::mul.Tensor" || !pg.is_tensor(mn.args[0]) || !pg.is_tensor(mn.args[1])) return false;
  if (!((pg.id(mn.args[0]) == x && pg.id(mn.args[1]) == r) || (pg.id(mn.args[0]) == r && pg.id(mn.args[1]) == x))) return false;
  for (int32_t v : {m.outputs[0], an.outputs[0], r, mn.outputs[0]}) {
    if (g.value(v).layout.dtype != DType::kFloat32) return false;
  }
  nodes.insert(nodes.end(), {*add, *rs, *mul});
  if (!pg.only_read_by(pw.outputs[0], {mean_node}) || !pg.only_read_by(m.outputs[0], {*add}) ||
      !pg.only_read_by(an.outputs[0], {*rs})) {
    return false;
  }
  // rsqrt's result read elsewhere (a training graph saves it for the backward):
  // the kernel writes it as the rows' rstd.
  int32_t rstd_out = -1;
  if (!pg.only_read_by(r, {*mul})) {
    const Layout& rl = g.value(r).layout;
    if (!rl.is_contiguous() || rl.numel() != rows->rows) return false;
    rstd_out = r;
  }
  // Optional cast of the normalized value, then the optional weight.
  int32_t out = mn.outputs[0];
  size_t last = *mul;
  int64_t rounding = -1;
  if (auto cast = pg.sole_reader(out); cast && pg.only_read_by(out, {*cast}) && pg.is_plain_cast(*cast) &&
                                       kernel_dtype(g.value(pg.node(*cast).outputs[0]).layout.dtype)) {
    out = pg.node(*cast).outputs[0];
    rounding = static_cast<int64_t>(g.value(out).layout.dtype);
    nodes.push_back(*cast);
    last = *cast;
  }
  Arg weight = Arg::none();
  if (auto wm = pg.sole_reader(out); wm && pg.only_read_by(out, {*wm}) && pg.node(*wm).op == "aten::mul.Tensor") {
    const Node& w = pg.node(*wm);
    const int other = pg.id(w.args[0]) == out ? 1 : 0;
    if (pg.is_tensor(w.args[0]) && pg.is_tensor(w.args[1]) && pg.id(w.args[1 - other]) == out &&
        is_column_vector(g, w.args[other], rows->cols) && kernel_dtype(g.value(w.outputs[0]).layout.dtype)) {
      weight = w.args[other];
      out = w.outputs[0];
      nodes.push_back(*wm);
      last = *wm;
    }
  }
  if (rounding < 0 && weight.kind == Arg::Kind::kNone && out != mn.outputs[0]) return false;
  const auto yr = as_rows(g.value(out).layout);
  if (!yr || yr->rows != rows->rows || yr->cols != rows->cols) return false;
  // A float32 x cast from a 16-bit input read by nothing else: the kernel reads the input.
  Arg input = Arg::tensor(x);
  if (auto cast = pg.producer(x); cast && pg.is_plain_cast(*cast) && pg.only_read_by(x, {*pow_node, *mul})) {
    const Arg& src = pg.node(*cast).args[0];
    const Layout& sl = g.value(pg.id(src)).layout;
    const auto sr = as_rows(sl);
    if (kernel_dtype(sl.dtype) && sr && sr->rows == rows->rows && sr->cols == rows->cols) {
      input = src;
      nodes.push_back(*cast);
    }
  }
  // Readers of the rstd outside the pattern must come after the kernel.
  for (size_t reader : pg.readers(r)) {
    if (reader < last && std::find(nodes.begin(), nodes.end(), reader) == nodes.end()) return false;
  }
  Node native{std::string(kNativeRowNorm),
              {input, weight, Arg::none(), Arg::real(eps), Arg::boolean(false), Arg::integer(rounding)},
              {out, -1, rstd_out}};
  pg.replace(nodes, last, std::move(native));
  return true;
}

// ---- rotary embedding -----------------------------------------------------

// From the concatenation cat([-x2, x1], -1) of rotate_half(x):
//   add(mul(x, cos), mul(cat, sin)), the products in either order.
bool match_rope(PatternGraph& pg, size_t cat_node) {
  const Graph& g = pg.graph();
  const Node& c = pg.node(cat_node);
  if (c.op != "aten::cat.default" || c.args.size() != 2 || c.args[0].kind != Arg::Kind::kTensorList ||
      c.args[0].ints.size() != 2 || c.outputs[0] < 0) {
    return false;
  }
  const Layout& cl = g.value(c.outputs[0]).layout;
  const size_t rank = cl.sizes.size();
  if (rank == 0 || rank > 4 || !c.args[1].is_scalar() ||
      (c.args[1].i != -1 && c.args[1].i != static_cast<int64_t>(rank) - 1)) {
    return false;
  }
  const auto neg = pg.producer(static_cast<int32_t>(c.args[0].ints[0]));
  if (!neg || pg.node(*neg).op != "aten::neg.default" || !pg.only_read_by(pg.node(*neg).outputs[0], {cat_node})) return false;
  const int32_t x2 = pg.id(pg.node(*neg).args[0]);
  const int32_t x1 = static_cast<int32_t>(c.args[0].ints[1]);
  const Layout &l1 = g.value(x1).layout, &l2 = g.value(x2).layout;
  if (g.root(x1) != g.root(x2) || l1.sizes != l2.sizes || l1.strides != l2.strides || l1.sizes.size() != rank) return false;
  const int64_t half = l1.sizes.back();
  if (half * 2 != cl.sizes.back() || l2.offset != l1.offset + half * l1.strides.back()) return false;
  // x: the whole last dimension over the halves' buffer.
  Layout xl = l1;
  xl.sizes.back() = 2 * half;
  const auto m2 = pg.sole_reader(c.outputs[0]);
  if (!m2 || !pg.only_read_by(c.outputs[0], {*m2}) || pg.node(*m2).op != "aten::mul.Tensor") return false;
  const Node& mul2 = pg.node(*m2);
  const int s_arg = pg.id(mul2.args[0]) == c.outputs[0] ? 1 : 0;
  if (!pg.is_tensor(mul2.args[s_arg]) || pg.id(mul2.args[1 - s_arg]) != c.outputs[0]) return false;
  const int32_t sin = pg.id(mul2.args[s_arg]);
  const auto add = pg.sole_reader(mul2.outputs[0]);
  if (!add || !pg.only_read_by(mul2.outputs[0], {*add})) return false;
  const Node& an = pg.node(*add);
  if (an.op != "aten::add.Tensor" || !an.args[2].is_scalar() || an.args[2].scalar() != 1.0) return false;
  if (!pg.is_tensor(an.args[0]) || !pg.is_tensor(an.args[1])) return false;
  const int32_t m1_value = pg.id(an.args[0]) == mul2.outputs[0] ? pg.id(an.args[1]) : pg.id(an.args[0]);
  const auto m1 = pg.producer(m1_value);
  if (!m1 || pg.node(*m1).op != "aten::mul.Tensor" || !pg.only_read_by(m1_value, {*add})) return false;
  const Node& mul1 = pg.node(*m1);
  int32_t x = -1, cos = -1;
  for (int k = 0; k < 2; ++k) {
    if (!pg.is_tensor(mul1.args[k]) || !pg.is_tensor(mul1.args[1 - k])) return false;
    const int32_t cand = pg.id(mul1.args[k]);
    if (g.root(cand) == g.root(x1) && g.value(cand).layout == xl) {
      x = cand;
      cos = pg.id(mul1.args[1 - k]);
      break;
    }
  }
  if (x < 0) return false;
  const Layout& out = g.value(an.outputs[0]).layout;
  const DType t = out.dtype;
  for (int32_t v : {x, cos, sin}) {
    const Layout& l = g.value(v).layout;
    if (!kernel_dtype(l.dtype) || !pg.broadcasts_to(l, xl.sizes) || l.sizes.size() > 4 ||
        (l.sizes.back() > 1 && l.strides.back() != 1)) {
      return false;
    }
  }
  if (!kernel_dtype(t) || out.sizes != xl.sizes || (out.sizes.back() > 1 && out.strides.back() != 1)) return false;
  for (int32_t v : {pg.node(*neg).outputs[0], c.outputs[0], mul2.outputs[0], m1_value}) {
    if (g.value(v).layout.dtype != (v == pg.node(*neg).outputs[0] || v == c.outputs[0] ? xl.dtype : t)) return false;
  }
  if (g.value(cos).layout.sizes.back() != 2 * half || g.value(sin).layout.sizes.back() != 2 * half) return false;
  Node native{std::string(kNativeRope), {Arg::tensor(x), Arg::tensor(cos), Arg::tensor(sin)}, {an.outputs[0]}};
  pg.replace({*neg, cat_node, *m2, *m1, *add}, *add, std::move(native));
  return true;
}

// The gradient autograd writes for that rotary embedding, from the gradient g
// of its output (g optionally a plain cast of a 16-bit gradient):
//   h = g * sin;  add(add(slice_scatter(zeros, -h[..., :half], -1, half, end),
//                         slice_scatter(zeros, h[..., half:], -1, 0, half)),
//                     g * cos)
// with the operands of each mul and add in either order: the rotary kernel
// with `backward` (neuronkernels/rope.hpp) in one pass instead of two
// products, a negation, two zero fills, two extern slice_scatters and two sums.
bool match_rope_backward(PatternGraph& pg, size_t add_node) {
  const Graph& g = pg.graph();
  auto is_add = [&](const Node& n) {
    return n.op == "aten::add.Tensor" && n.args.size() == 3 && n.args[2].is_scalar() && n.args[2].scalar() == 1.0 &&
           pg.is_tensor(n.args[0]) && pg.is_tensor(n.args[1]) && n.outputs[0] >= 0;
  };
  const Node& fin = pg.node(add_node);
  if (!is_add(fin)) return false;
  const Layout& out = g.value(fin.outputs[0]).layout;
  const DType t = out.dtype;
  const size_t rank = out.sizes.size();
  if (!kernel_dtype(t) || rank == 0 || rank > 4 || out.sizes.back() % 2 != 0 ||
      (out.sizes.back() > 1 && out.strides.back() != 1)) {
    return false;
  }
  const int64_t half = out.sizes.back() / 2;
  // One operand is the sum of the two scatters, the other g * cos.
  for (int k = 0; k < 2; ++k) {
    const int32_t sum = pg.id(fin.args[k]), gcos = pg.id(fin.args[1 - k]);
    const auto s_node = pg.producer(sum), m_node = pg.producer(gcos);
    if (!s_node || !m_node || !is_add(pg.node(*s_node)) || pg.node(*m_node).op != "aten::mul.Tensor" ||
        g.value(sum).layout.dtype != t || g.value(gcos).layout.dtype != t) {
      continue;
    }
    if (!pg.only_read_by(sum, {add_node}) || !pg.only_read_by(gcos, {add_node})) continue;
    const Node& sn = pg.node(*s_node);
    // The scatters: low writes h's upper half into [0, half), high writes
    // -(h's lower half) into [half, 2 * half).
    std::optional<size_t> low, high;
    std::set<size_t> fills;
    bool ok = true;
    for (int j = 0; j < 2 && ok; ++j) {
      const int32_t v = pg.id(sn.args[j]);
      const auto sc = pg.producer(v);
      if (!sc || !pg.only_read_by(v, {*s_node})) { ok = false; break; }
      const Node& n = pg.node(*sc);
      if (n.op != "aten::slice_scatter.default" || n.args.size() != 6 || !pg.is_tensor(n.args[0]) ||
          !pg.is_tensor(n.args[1]) || g.value(v).layout.dtype != t || g.value(v).layout.sizes != out.sizes) {
        ok = false;
        break;
      }
      const int64_t dim = n.args[2].i < 0 ? n.args[2].i + static_cast<int64_t>(rank) : n.args[2].i;
      const int64_t start = n.args[3].kind == Arg::Kind::kNone ? 0 : n.args[3].i;
      const int64_t end = n.args[4].kind == Arg::Kind::kNone ? 2 * half : std::min(n.args[4].i, 2 * half);
      if (dim != static_cast<int64_t>(rank) - 1 || n.args[5].i != 1) { ok = false; break; }
      const auto fill = pg.producer(pg.id(n.args[0]));
      if (!fill || pg.node(*fill).op != "aten::full.default" || !pg.node(*fill).args[1].is_scalar() ||
          pg.node(*fill).args[1].scalar() != 0.0 || g.value(pg.id(n.args[0])).layout.dtype != t) {
        ok = false;
        break;
      }
      fills.insert(*fill);
      if (start == 0 && end == half && !low) {
        low = *sc;
      } else if (start == half && end == 2 * half && !high) {
        high = *sc;
      } else {
        ok = false;
      }
    }
    if (!ok || !low || !high) continue;
    // A zero fill read by other scatters too (CSE shares one among layers)
    // stays for them.
    std::vector<size_t> own_fills;
    for (size_t f : fills) {
      const int32_t zeros = pg.node(f).outputs[0];
      if (fills.size() == 1 ? pg.only_read_by(zeros, {*low, *high})
                            : pg.only_read_by(zeros, {pg.id(pg.node(*low).args[0]) == zeros ? *low : *high})) {
        own_fills.push_back(f);
      }
    }
    // high's source: neg(h[..., :half]); low's: h[..., half:].
    const int32_t neg_out = pg.id(pg.node(*high).args[1]);
    const auto neg = pg.producer(neg_out);
    if (!neg || pg.node(*neg).op != "aten::neg.default" || !pg.only_read_by(neg_out, {*high}) ||
        g.value(neg_out).layout.dtype != t) {
      continue;
    }
    const int32_t h1 = pg.id(pg.node(*neg).args[0]), h2 = pg.id(pg.node(*low).args[1]);
    if (h1 < 0 || h2 < 0 || g.root(h1) != g.root(h2)) continue;
    const int32_t h = g.root(h1);
    const Layout &hl = g.value(h).layout, &l1 = g.value(h1).layout, &l2 = g.value(h2).layout;
    std::vector<int64_t> half_sizes = hl.sizes;
    if (half_sizes.size() != rank || hl.sizes != out.sizes || hl.dtype != t) continue;
    half_sizes.back() = half;
    if (l1.sizes != half_sizes || l2.sizes != half_sizes || l1.strides != hl.strides || l2.strides != hl.strides ||
        l1.offset != hl.offset || l2.offset != hl.offset + half * hl.strides.back()) {
      continue;
    }
    const auto hm = pg.producer(h);
    if (!hm || pg.node(*hm).op != "aten::mul.Tensor" || !pg.only_read_by(h, {*neg, *low})) continue;
    // h = grad * sin and gcos = grad * cos, over the same grad.
    const Node &hn = pg.node(*hm), &mn = pg.node(*m_node);
    int32_t grad = -1, sin = -1, cos = -1;
    for (int a = 0; a < 2 && grad < 0; ++a) {
      for (int b = 0; b < 2; ++b) {
        if (pg.is_tensor(hn.args[a]) && pg.is_tensor(mn.args[b]) && pg.id(hn.args[a]) == pg.id(mn.args[b]) &&
            pg.is_tensor(hn.args[1 - a]) && pg.is_tensor(mn.args[1 - b])) {
          grad = pg.id(hn.args[a]);
          sin = pg.id(hn.args[1 - a]);
          cos = pg.id(mn.args[1 - b]);
          break;
        }
      }
    }
    if (grad < 0 || g.value(grad).layout.sizes != out.sizes || g.value(grad).layout.dtype != t) continue;
    std::vector<size_t> nodes = {*hm, *neg, *low, *high, *s_node, *m_node, add_node};
    nodes.insert(nodes.end(), own_fills.begin(), own_fills.end());
    // A float32 cast of a 16-bit gradient read by the two products only: the
    // kernel widens as it reads (exact).
    if (const auto cast = pg.producer(grad);
        t == DType::kFloat32 && cast && pg.is_plain_cast(*cast) && pg.only_read_by(grad, {*hm, *m_node})) {
      const int32_t src = pg.id(pg.node(*cast).args[0]);
      const DType from = src >= 0 ? g.value(src).layout.dtype : DType::kFloat32;
      if ((from == DType::kBFloat16 || from == DType::kFloat16) && g.value(src).layout.sizes == out.sizes) {
        grad = src;
        nodes.push_back(*cast);
      }
    }
    for (int32_t v : {grad, cos, sin}) {
      const Layout& l = g.value(v).layout;
      if (!kernel_dtype(l.dtype) || !pg.broadcasts_to(l, out.sizes) || l.sizes.size() > 4 ||
          (l.sizes.back() > 1 && l.strides.back() != 1)) {
        ok = false;
      }
    }
    if (!ok || g.value(cos).layout.sizes.back() != 2 * half || g.value(sin).layout.sizes.back() != 2 * half) continue;
    for (size_t n : nodes) if (pg.taken(n)) ok = false;
    if (!ok) continue;
    Node native{std::string(kNativeRopeBackward), {Arg::tensor(grad), Arg::tensor(cos), Arg::tensor(sin)},
                {fin.outputs[0]}};
    pg.replace(nodes, add_node, std::move(native));
    return true;
  }
  return false;
}

// ---- matrix products of upcast 16-bit operands --------------------------------

constexpr int64_t kTorchFloat32 = 6;  // c10::ScalarType::Float, as the graph passes dtypes

// mm(a.float(), b.float()) and addmm(c, a.float(), b.float()) of bfloat16 a and
// b (TRL's fused LM head accumulates its gradients so, to keep them out of
// bfloat16): a product of two bfloat16 values is exact in float32, so the
// library's bfloat16 GEMM with float32 accumulation sums the same products
// without materializing the float32 copies (ATen's mm.dtype / addmm.dtype with
// out_dtype float32; the extern call falls back to the casts and a float32 GEMM
// where the CPU has no bfloat16 GEMM). The casts go when nothing else reads them.
bool match_upcast_matmul(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  const bool mm = n.op == "aten::mm.default", addmm = n.op == "aten::addmm.default";
  if ((!mm && !addmm) || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  const Graph& g = pg.graph();
  if (g.value(n.outputs[0]).layout.dtype != DType::kFloat32) return false;
  const size_t first = mm ? 0 : 1;
  if (n.args.size() < first + 2 || (addmm && !pg.is_tensor(n.args[0]))) return false;
  std::vector<size_t> removed{i};
  Arg sources[2];
  for (size_t k = 0; k < 2; ++k) {
    const Arg& operand = n.args[first + k];
    if (!pg.is_tensor(operand)) return false;
    const std::optional<size_t> cast = pg.producer(pg.id(operand));
    if (!cast || !pg.is_plain_cast(*cast)) return false;
    const Arg& source = pg.node(*cast).args[0];
    if (g.value(pg.id(source)).layout.dtype != DType::kBFloat16) return false;
    sources[k] = source;
    if (pg.only_read_by(pg.id(operand), {i}) && std::find(removed.begin(), removed.end(), *cast) == removed.end()) {
      removed.push_back(*cast);
    }
  }
  Node upcast = mm ? Node{"aten::mm.dtype", {sources[0], sources[1], Arg::integer(kTorchFloat32)}, n.outputs}
                   : Node{"aten::addmm.dtype",
                          {n.args[0], sources[0], sources[1], Arg::integer(kTorchFloat32),
                           n.args.size() > 3 ? n.args[3] : Arg::integer(1), n.args.size() > 4 ? n.args[4] : Arg::integer(1)},
                          n.outputs};
  pg.replace(removed, i, std::move(upcast));
  return true;
}

// ---- scalar constants -------------------------------------------------------

// v rounded to t, as a 0-dim tensor of type t holds it.
double rounded(double v, DType t) {
  const float f = static_cast<float>(v);
  if (t == DType::kFloat16) return static_cast<float>(static_cast<_Float16>(f));
  if (t != DType::kBFloat16 || std::isnan(f)) return f;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

// ---- a tied embedding's weight gradient ---------------------------------------

// add(base, embedding_dense_backward(grad, indices, rows, padding_idx, False)),
// either order, alpha 1, float32, where base is an intermediate nothing else
// reads (the LM head's weight gradient, when the embedding shares its weight):
// the embedding's rows go into base in place (kNativeEmbeddingBackwardAdd), for
// a weight-sized zero fill, the gradient's rows and a pass over three
// weight-sized buffers. The sum's readers and the graph output read base.
bool match_embedding_backward_add(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  if (n.op != "aten::add.Tensor" || n.outputs.size() != 1 || n.outputs[0] < 0 || n.args.size() < 2 ||
      !pg.is_tensor(n.args[0]) || !pg.is_tensor(n.args[1])) {
    return false;
  }
  if (n.args.size() > 2 && !(n.args[2].kind == Arg::Kind::kNone || (n.args[2].is_scalar() && n.args[2].scalar() == 1.0))) {
    return false;
  }
  const Graph& g = pg.graph();
  const int32_t sum = n.outputs[0];
  for (size_t side : {0u, 1u}) {
    const int32_t e = pg.id(n.args[side]);
    int32_t base = pg.id(n.args[1 - side]);
    // A view that is its whole buffer (a transpose of a transposed product) is that buffer.
    if (g.value(base).is_view() && g.value(base).layout == g.value(g.root(base)).layout) base = g.root(base);
    const std::optional<size_t> producer = pg.producer(e);
    if (!producer) continue;
    const Node& emb = pg.node(*producer);
    if (emb.op != "aten::embedding_dense_backward.default" || emb.args.size() != 5 || !pg.is_tensor(emb.args[0]) ||
        !pg.is_tensor(emb.args[1]) || emb.args[3].kind != Arg::Kind::kInt || !emb.args[4].is_scalar() ||
        emb.args[4].scalar() != 0 || !pg.only_read_by(e, {i}) || !pg.only_read_by(base, {i})) {
      continue;
    }
    const Layout &bl = g.value(base).layout, &el = g.value(e).layout;
    const Layout &gl = g.value(pg.id(emb.args[0])).layout, &il = g.value(pg.id(emb.args[1])).layout;
    if (g.value(sum).is_view() || !(g.value(sum).layout == bl) || bl.dtype != DType::kFloat32 ||
        bl.sizes.size() != 2 || el.sizes != bl.sizes || el.dtype != DType::kFloat32 || gl.dtype != DType::kFloat32 ||
        (il.dtype != DType::kInt64 && il.dtype != DType::kInt32) || gl.sizes.size() != il.sizes.size() + 1 ||
        gl.sizes.back() != bl.sizes[1] || !std::equal(il.sizes.begin(), il.sizes.end(), gl.sizes.begin())) {
      continue;
    }
    Node native{std::string(kNativeEmbeddingBackwardAdd), {Arg::tensor(base), emb.args[0], emb.args[1], emb.args[3]}, {}};
    pg.replace({*producer, i}, i, std::move(native));
    pg.take_over(sum, base);
    return true;
  }
  return false;
}

// scalar_tensor(v) (a 0-dim constant, as SDPA's mask conversion writes -inf and
// 0) read only as an operand of pointwise nodes: the value becomes a constant
// of those nodes (an immediate of their tiles) and the node disappears.
bool fold_scalar_tensor(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  const Graph& g = pg.graph();
  if (n.op != "aten::scalar_tensor.default" || n.outputs.size() != 1 || n.outputs[0] < 0 || !n.args[0].is_scalar()) {
    return false;
  }
  const int32_t out = n.outputs[0];
  const Layout& l = g.value(out).layout;
  if (!l.sizes.empty() || !is_tile_float(l.dtype) || pg.pinned(out)) return false;
  for (size_t r : pg.readers(out)) {
    if (pg.taken(r) || !is_pointwise(g, pg.node(r))) return false;
    for (const Arg& a : pg.node(r).args) {
      if (a.kind == Arg::Kind::kTensorList || (a.kind == Arg::Kind::kTensor && a.i != out && g.root(static_cast<int32_t>(a.i)) == out)) {
        return false;  // read through a view
      }
    }
  }
  pg.fold_constant(i, out, Arg::real(rounded(n.args[0].scalar(), l.dtype)));
  return true;
}

}  // namespace

PatternReport rewrite_patterns(Graph& g, const PatternOptions& options) {
  PatternReport report;
  PatternGraph pg(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (fold_scalar_tensor(pg, i)) ++report.folded;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (pg.taken(i)) continue;
    if (match_attention(pg, i) || match_attention_backward(pg, i)) {
      ++report.attention;
    } else if (match_layer_norm(pg, i) || match_rms_norm(pg, i)) {
      ++report.norms;
    } else if (match_rope(pg, i) || match_rope_backward(pg, i)) {
      ++report.rope;
    } else if (options.mixed_precision_gemm && match_upcast_matmul(pg, i)) {
      ++report.upcast_matmuls;
    } else if (match_embedding_backward_add(pg, i)) {
      ++report.embedding_grads;
    }
  }
  report.replaced_nodes = pg.replaced_nodes();
  pg.apply();
  return report;
}

}  // namespace neuroncompiler
