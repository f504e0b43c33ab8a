#include "neuroncompiler/simplify.hpp"

#include <cmath>

#include "pattern_graph.hpp"

namespace neuroncompiler {
namespace {

bool is_zero_fill_node(const Node& n) {
  // full(size, fill_value, dtype, layout, device, pin_memory)
  return n.op == "aten::full.default" && n.outputs.size() == 1 && n.outputs[0] >= 0 && n.args.size() >= 2 &&
         n.args[1].is_scalar() && n.args[1].scalar() == 0.0;
}

// v's buffer is a zero fill. Nothing writes into it: a functional graph only
// copies into its inputs.
bool reads_zero_fill(const PatternGraph& pg, int32_t v) {
  const std::optional<size_t> fill = pg.producer(pg.graph().root(v));
  return fill && is_zero_fill_node(pg.node(*fill));
}

bool scalar_is(const Node& n, size_t index, double want) {
  return n.args.size() <= index || (n.args[index].is_scalar() && n.args[index].scalar() == want);
}

bool scalar_is_finite(const Node& n, size_t index) {
  return n.args.size() <= index || (n.args[index].is_scalar() && std::isfinite(n.args[index].scalar()));
}

// addmm(zeros, a, b, beta, alpha = 1) and addmm.dtype(zeros, a, b, out_dtype,
// beta, alpha = 1): beta * 0 adds nothing (beta finite, so no 0 * inf).
bool match_zero_accumulator(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  const bool with_dtype = n.op == "aten::addmm.dtype";
  if ((!with_dtype && n.op != "aten::addmm.default") || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  const size_t beta = with_dtype ? 4 : 3, alpha = beta + 1;
  if (n.args.size() < (with_dtype ? 4u : 3u) || !pg.is_tensor(n.args[0]) || !scalar_is(n, alpha, 1.0) ||
      !scalar_is_finite(n, beta) || !reads_zero_fill(pg, pg.id(n.args[0]))) {
    return false;
  }
  Node product = with_dtype ? Node{"aten::mm.dtype", {n.args[1], n.args[2], n.args[3]}, n.outputs}
                            : Node{"aten::mm.default", {n.args[1], n.args[2]}, n.outputs};
  pg.replace({i}, i, std::move(product));
  return true;
}

// slice_scatter(base, src, dim, start, end, step) where src has the result's
// layout: a slice as long as the dimension is all of it, so the result is src.
bool match_whole_slice_scatter(PatternGraph& pg, size_t i) {
  const Node& n = pg.node(i);
  if (n.op != "aten::slice_scatter.default" || n.outputs.size() != 1 || n.outputs[0] < 0 || n.args.size() < 2 ||
      !pg.is_tensor(n.args[1])) {
    return false;
  }
  const Graph& g = pg.graph();
  const int32_t out = n.outputs[0], src = pg.id(n.args[1]);
  const Value &o = g.value(out), &s = g.value(src);
  if (o.is_view() || s.is_view() || !(o.layout == s.layout) || !s.layout.is_contiguous() || s.layout.offset != 0) {
    return false;
  }
  if (!pg.only_read_by(src, {i})) return false;
  pg.alias(i, out, src);
  return true;
}

}  // namespace

SimplifyReport simplify_accumulators(Graph& g) {
  SimplifyReport report;
  PatternGraph pg(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (match_zero_accumulator(pg, i)) ++report.zero_accumulators;
    else if (match_whole_slice_scatter(pg, i)) ++report.whole_scatters;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!pg.taken(i) && is_zero_fill_node(n) && !pg.pinned(n.outputs[0]) && !pg.read_after_rewrite(n.outputs[0])) {
      pg.remove(i);
      ++report.dead_fills;
    }
  }
  pg.apply();
  return report;
}

}  // namespace neuroncompiler
