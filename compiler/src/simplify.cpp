#include "neuroncompiler/simplify.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "neuroncompiler/reinplace.hpp"
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

// Where the elements of `view` (a view of a buffer) lie in `src`, when they
// all lie in `region` of that buffer, which holds src's elements in src's
// logical order: each dimension of `view` steps along one dimension of the
// region (a slice, transpose or unsqueeze of it) or broadcasts. nullopt for
// anything else (steps across dimensions, elements outside the region).
std::optional<Layout> remap_into(const Layout& view, const Layout& region, const Layout& src) {
  const size_t rank = region.sizes.size();
  if (view.dtype != region.dtype || view.offset < region.offset) return std::nullopt;
  // Where the view starts, as an index into the region (largest strides first).
  std::vector<size_t> order(rank);
  for (size_t d = 0; d < rank; ++d) order[d] = d;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return region.strides[a] > region.strides[b]; });
  std::vector<int64_t> first(rank, 0);
  int64_t rest = view.offset - region.offset;
  for (size_t d : order) {
    if (region.sizes[d] <= 1 || region.strides[d] <= 0) continue;
    first[d] = rest / region.strides[d];
    rest -= first[d] * region.strides[d];
  }
  if (rest != 0) return std::nullopt;
  Layout out{view.dtype, view.sizes, std::vector<int64_t>(view.sizes.size(), 0), src.offset};
  std::vector<int64_t> last = first;
  std::vector<bool> used(rank, false);
  for (size_t i = 0; i < view.sizes.size(); ++i) {
    if (view.sizes[i] == 0) return std::nullopt;
    if (view.sizes[i] == 1 || view.strides[i] == 0) continue;
    size_t d = 0;
    while (d < rank && !(region.sizes[d] > 1 && region.strides[d] == view.strides[i] && !used[d])) ++d;
    if (d == rank) return std::nullopt;
    used[d] = true;
    last[d] += view.sizes[i] - 1;
    out.strides[i] = src.strides[d];
  }
  for (size_t d = 0; d < rank; ++d) {
    if (first[d] < 0 || last[d] >= region.sizes[d]) return std::nullopt;
    out.offset += first[d] * src.strides[d];
  }
  return out;
}

// The views of slice_scatter(base, src, ...)'s result that lie in the region
// it wrote hold src's elements: they view src instead (and a view that is
// src, element for element, is src). TRL's `torch.mm(a, b, out=buf[:, :m])`
// and its later reads of `buf[:, :m]` (and of its transpose) become a scatter
// of the product into `buf` and views of it. Not where a node writes src's
// buffer (an input copied into): the scatter kept the values it had before.
// Returns the views redirected.
int match_views_of_scatter(PatternGraph& pg, size_t i, const std::set<int32_t>& written) {
  const Node& n = pg.node(i);
  if (pg.taken(i) || n.op != "aten::slice_scatter.default" || n.outputs.size() != 1 || n.outputs[0] < 0 ||
      n.args.size() < 2 || !pg.is_tensor(n.args[1])) {
    return 0;
  }
  const Graph& g = pg.graph();
  const int32_t out = n.outputs[0], src = pg.id(n.args[1]), src_root = g.root(src);
  if (g.value(out).is_view() || written.count(src_root)) return 0;
  const std::optional<Layout> region = scattered_view(n, g.value(out).layout);
  const Layout& src_layout = g.value(src).layout;
  if (!region || region->sizes != src_layout.sizes) return 0;
  int redirected = 0;
  for (const Value& v : g.values) {
    if (v.base != out || v.id < src_root) continue;  // a view comes after what it views
    if (std::find(g.outputs.begin(), g.outputs.end(), v.id) != g.outputs.end()) continue;  // the caller's layout
    const std::optional<Layout> moved = remap_into(v.layout, *region, src_layout);
    if (!moved) continue;
    if (*moved == src_layout && !g.value(src).is_view()) {
      redirected += pg.read_instead(v.id, src) > 0;
    } else {
      pg.rebase(v.id, src_root, *moved);
      ++redirected;
    }
  }
  return redirected;
}

// What the rewrites above leave unread and may go: fills, scatters and copies
// compute nothing else (no random state, no writes into their arguments).
bool removable_when_unread(const Node& n) {
  static const std::set<std::string_view> kOps = {
      "aten::full.default",          "aten::zeros.default",          "aten::empty.memory_format",
      "aten::empty_strided.default", "aten::scalar_tensor.default",  "aten::slice_scatter.default",
      "aten::select_scatter.default", "aten::copy.default",          "aten::_to_copy.default",
      "aten::clone.default",
  };
  return kOps.count(n.op) > 0;
}

}  // namespace

SimplifyReport simplify_functionalized_updates(Graph& g) {
  SimplifyReport report;
  PatternGraph pg(g);
  std::set<int32_t> written;  // buffers a node writes into (inputs, by copy_)
  for (const Node& n : g.nodes) {
    if (writes_first_argument(n)) written.insert(g.root(PatternGraph::id(n.args[0])));
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (match_zero_accumulator(pg, i)) ++report.zero_accumulators;
    else if (match_whole_slice_scatter(pg, i)) ++report.whole_scatters;
    else report.scattered_views += match_views_of_scatter(pg, i, written);
  }
  // Last to first, so that a chain (a fill, scattered into, its result
  // scattered into again) goes whole.
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    if (pg.taken(i) || !removable_when_unread(n)) continue;
    const bool unread = std::all_of(n.outputs.begin(), n.outputs.end(), [&](int32_t o) {
      return o < 0 || (!pg.pinned(o) && !pg.read_after_rewrite(o));
    });
    if (unread) {
      pg.remove(i);
      ++report.dead_nodes;
    }
  }
  pg.apply();
  return report;
}

}  // namespace neuroncompiler
