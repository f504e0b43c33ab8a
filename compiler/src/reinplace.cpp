#include "neuroncompiler/reinplace.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace neuroncompiler {
namespace {

// Functional ops whose in-place variant takes the same arguments, self first.
const std::map<std::string_view, std::string_view>& inplace_variants() {
  static const std::map<std::string_view, std::string_view> kVariants = {
      {"aten::index_put.default", "aten::index_put_.default"},
      {"aten::index_copy.default", "aten::index_copy_.default"},
      {"aten::scatter.src", "aten::scatter_.src"},
      {"aten::scatter.value", "aten::scatter_.value"},
  };
  return kVariants;
}

bool reads(const Graph& g, const Node& n, int32_t root) {
  const std::vector<int32_t> ids = tensor_args(n);
  return std::any_of(ids.begin(), ids.end(), [&](int32_t id) { return g.root(id) == root; });
}

}  // namespace

std::optional<Layout> scattered_view(const Node& n, const Layout& base) {
  const bool slice = n.op == "aten::slice_scatter.default";
  const size_t rank = base.sizes.size();
  if (n.args.size() < (slice ? 6u : 4u) || n.args[2].kind != Arg::Kind::kInt || rank == 0) return std::nullopt;
  int64_t dim = n.args[2].i;
  if (dim < 0) dim += static_cast<int64_t>(rank);
  if (dim < 0 || dim >= static_cast<int64_t>(rank)) return std::nullopt;
  const int64_t size = base.sizes[dim], stride = base.strides[dim];
  Layout view = base;
  if (!slice) {
    if (n.args[3].kind != Arg::Kind::kInt) return std::nullopt;
    int64_t index = n.args[3].i;
    if (index < 0) index += size;
    if (index < 0 || index >= size) return std::nullopt;
    view.offset += index * stride;
    view.sizes.erase(view.sizes.begin() + dim);
    view.strides.erase(view.strides.begin() + dim);
    return view;
  }
  auto bound = [size](const Arg& a, int64_t otherwise) -> std::optional<int64_t> {
    if (a.kind == Arg::Kind::kNone) return otherwise;
    if (a.kind != Arg::Kind::kInt) return std::nullopt;
    int64_t v = a.i;
    if (v < 0) v += size;
    return std::clamp<int64_t>(v, 0, size);
  };
  const std::optional<int64_t> start = bound(n.args[3], 0), end = bound(n.args[4], size);
  if (!start || !end || n.args[5].kind != Arg::Kind::kInt || n.args[5].i < 1) return std::nullopt;
  const int64_t step = n.args[5].i;
  view.offset += *start * stride;
  view.sizes[dim] = *end > *start ? (*end - *start + step - 1) / step : 0;
  view.strides[dim] = stride * step;
  return view;
}

bool writes_first_argument(const Node& n) {
  if (n.op == kCopyInto) return true;
  const std::string_view name = std::string_view(n.op).substr(0, n.op.find('.'));
  return n.outputs.empty() && !n.args.empty() && n.args[0].kind == Arg::Kind::kTensor && name.ends_with('_');
}

int reinplace(Graph& g) {
  int rewritten = 0;
  std::vector<bool> is_input(g.values.size(), false), is_output(g.values.size(), false);
  for (int32_t in : g.inputs) is_input[in] = true;
  for (int32_t out : g.outputs) if (out >= 0) is_output[g.root(out)] = true;
  std::vector<int32_t> producer(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int32_t o : g.nodes[i].outputs) if (o >= 0) producer[o] = static_cast<int32_t>(i);
  }
  std::vector<bool> removed(g.nodes.size(), false);
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    const Node& copy = g.nodes[j];
    if (copy.op != kCopyInto) continue;
    const auto dst = static_cast<int32_t>(copy.args[0].i), src = static_cast<int32_t>(copy.args[1].i);
    if (!is_input[dst] || g.values[dst].is_view() || g.values[src].is_view() || is_output[src] || producer[src] < 0) continue;
    const auto i = static_cast<size_t>(producer[src]);
    Node& op = g.nodes[i];
    const auto variant = inplace_variants().find(op.op);
    if (variant == inplace_variants().end() || op.outputs.size() != 1 || op.args.empty() ||
        op.args[0].kind != Arg::Kind::kTensor || op.args[0].i != dst || g.value(src).layout != g.value(dst).layout) {
      continue;
    }
    // Nothing reads or writes the input between the op and the copy back, and
    // nothing but the copy writes it after the op.
    bool clear = true;
    for (size_t k = i + 1; k < g.nodes.size() && clear; ++k) {
      if (k == j || removed[k]) continue;
      if (k < j && reads(g, g.nodes[k], dst)) clear = false;
      if (writes_first_argument(g.nodes[k]) && g.root(static_cast<int32_t>(g.nodes[k].args[0].i)) == dst) clear = false;
    }
    if (!clear) continue;
    op.op = std::string(variant->second);
    op.outputs.clear();
    // The result is now the input's buffer: it and its views view the input.
    for (Value& v : g.values) {
      if (v.id == src || v.base == src) v.base = dst;
    }
    removed[j] = true;
    ++rewritten;
  }
  // slice_scatter / select_scatter (AOTAutograd's form of writing a slice, e.g.
  // the backward of the rotary embedding's halves or of a slice) copy `self`
  // whole to change a part. Where `self` is an intermediate nothing reads
  // after, `src` is copied into its slice in place instead, and the result
  // views `self`.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if ((n.op != "aten::slice_scatter.default" && n.op != "aten::select_scatter.default") || removed[i] ||
        n.outputs.size() != 1 || n.outputs[0] < 0 || n.args.size() < 2 || n.args[0].kind != Arg::Kind::kTensor ||
        n.args[1].kind != Arg::Kind::kTensor) {
      continue;
    }
    const auto self = static_cast<int32_t>(n.args[0].i), src = static_cast<int32_t>(n.args[1].i);
    const int32_t out = n.outputs[0];
    if (g.values[self].is_view() || is_input[self] || is_output[self] || g.root(src) == self ||
        g.value(out).layout != g.value(self).layout) {
      continue;
    }
    const std::optional<Layout> view = scattered_view(n, g.value(self).layout);
    if (!view || view->sizes != g.value(src).layout.sizes) continue;
    bool read_later = false;
    for (size_t k = i + 1; k < g.nodes.size() && !read_later; ++k) read_later = !removed[k] && reads(g, g.nodes[k], self);
    if (read_later) continue;
    Value slice_value;
    slice_value.id = static_cast<int32_t>(g.values.size());
    slice_value.layout = *view;
    slice_value.base = self;
    g.values.push_back(slice_value);
    for (Value& v : g.values) {
      if (v.id == out || v.base == out) v.base = self;
    }
    n = Node{kCopyInto, {Arg::tensor(slice_value.id), Arg::tensor(src), Arg::boolean(false)}, {}};  // copy_'s schema
    ++rewritten;
  }
  if (rewritten > 0) {
    std::vector<Node> kept;
    for (size_t k = 0; k < g.nodes.size(); ++k) if (!removed[k]) kept.push_back(std::move(g.nodes[k]));
    g.nodes = std::move(kept);
  }
  return rewritten;
}

}  // namespace neuroncompiler
