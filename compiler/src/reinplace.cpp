#include "neuroncompiler/reinplace.hpp"

#include <map>
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
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::kTensor && g.root(static_cast<int32_t>(a.i)) == root) return true;
    if (a.kind == Arg::Kind::kTensorList) {
      for (int64_t id : a.ints) if (id >= 0 && g.root(static_cast<int32_t>(id)) == root) return true;
    }
  }
  return false;
}

}  // namespace

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
  if (rewritten > 0) {
    std::vector<Node> kept;
    for (size_t k = 0; k < g.nodes.size(); ++k) if (!removed[k]) kept.push_back(std::move(g.nodes[k]));
    g.nodes = std::move(kept);
  }
  return rewritten;
}

}  // namespace neuroncompiler
