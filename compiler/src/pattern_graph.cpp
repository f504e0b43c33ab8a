#include "pattern_graph.hpp"

#include <algorithm>

namespace neuroncompiler {

PatternGraph::PatternGraph(Graph& g)
    : g_(g),
      producer_(g.values.size(), -1),
      root_readers_(g.values.size()),
      readers_(g.values.size()),
      pinned_(g.values.size(), false),
      taken_(g.nodes.size(), false) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (int32_t id : tensor_args(n)) {
      readers_[id].insert(i);
      root_readers_[g.root(id)].insert(i);
    }
    for (int32_t o : n.outputs) if (o >= 0) producer_[o] = static_cast<int32_t>(i);
  }
  for (int32_t in : g.inputs) pinned_[g.root(in)] = true;
  for (int32_t out : g.outputs) if (out >= 0) pinned_[g.root(out)] = true;
}

std::optional<size_t> PatternGraph::producer(int32_t v) const {
  if (v < 0 || g_.values[v].is_view() || producer_[v] < 0 || taken_[producer_[v]]) return std::nullopt;
  return static_cast<size_t>(producer_[v]);
}

std::optional<size_t> PatternGraph::sole_reader(int32_t v) const {
  if (v < 0 || g_.values[v].is_view() || root_readers_[v].size() != 1 || readers_[v].size() != 1) return std::nullopt;
  const size_t r = *readers_[v].begin();
  if (taken_[r]) return std::nullopt;
  return r;
}

bool PatternGraph::only_read_by(int32_t v, std::initializer_list<size_t> nodes) const {
  if (v < 0 || g_.values[v].is_view() || pinned_[v]) return false;
  for (size_t r : root_readers_[v]) {
    bool allowed = false;
    for (size_t n : nodes) allowed = allowed || n == r;
    if (!allowed) return false;
  }
  return true;
}

bool PatternGraph::is_plain_cast(size_t i) const {
  const Node& n = g_.nodes[i];
  if (taken_[i] || n.op != "aten::_to_copy.default" || n.outputs.size() != 1 || n.outputs[0] < 0) return false;
  if (n.args.empty() || !is_tensor(n.args[0])) return false;
  // (self, dtype, layout, device, pin_memory, non_blocking, memory_format)
  for (size_t a = 2; a < n.args.size(); ++a) {
    const Arg& arg = n.args[a];
    const bool benign = arg.kind == Arg::Kind::kNone || arg.kind == Arg::Kind::kDevice ||
                        (arg.kind == Arg::Kind::kBool && arg.i == 0) || (a == 2 && arg.kind == Arg::Kind::kInt && arg.i == 0);
    if (!benign) return false;
  }
  return g_.value(id(n.args[0])).layout.sizes == g_.value(n.outputs[0]).layout.sizes;
}

bool PatternGraph::broadcasts_to(const Layout& l, const std::vector<int64_t>& sizes) {
  if (l.sizes.size() > sizes.size()) return false;
  for (size_t k = 0; k < l.sizes.size(); ++k) {
    const int64_t want = sizes[sizes.size() - l.sizes.size() + k];
    if (l.sizes[k] != want && l.sizes[k] != 1) return false;
  }
  return true;
}

void PatternGraph::replace(const std::vector<size_t>& nodes, size_t anchor, Node native) {
  for (size_t n : nodes) {
    if (taken_[n]) throw CompileError("pattern pass: " + g_.describe_node(n) + " matched twice");
  }
  for (size_t n : nodes) taken_[n] = true;
  native.replaces = static_cast<int32_t>(nodes.size());
  replaced_ += native.replaces;
  replacements_[anchor] = std::move(native);
}

void PatternGraph::fold_constant(size_t i, int32_t v, const Arg& constant) {
  for (size_t r : root_readers_[v]) {
    for (Arg& a : g_.nodes[r].args) {
      if (a.kind == Arg::Kind::kTensor && a.i == v) a = constant;
    }
  }
  root_readers_[v].clear();
  readers_[v].clear();
  taken_[i] = true;
}

void PatternGraph::alias(size_t i, int32_t v, int32_t src) {
  take_over(v, src);
  root_readers_[src].erase(i);
  readers_[src].erase(i);
  taken_[i] = true;
}

void PatternGraph::take_over(int32_t v, int32_t src) {
  for (size_t r : root_readers_[v]) {
    rename_tensor_arg(g_.nodes[r], v, src);
    auto native = replacements_.find(r);
    if (native != replacements_.end()) rename_tensor_arg(native->second, v, src);
    root_readers_[src].insert(r);
  }
  for (size_t r : readers_[v]) readers_[src].insert(r);
  for (Value& value : g_.values) {
    if (value.base == v) value.base = src;
  }
  for (int32_t& out : g_.outputs) {
    if (out == v) out = src;
  }
  pinned_[src] = pinned_[src] || pinned_[v];
  root_readers_[v].clear();
  readers_[v].clear();
}

void PatternGraph::rebase(int32_t v, int32_t base, const Layout& layout) {
  const int32_t old_root = g_.root(v);
  g_.values[v].base = base;
  g_.values[v].layout = layout;
  for (size_t r : readers_[v]) {
    root_readers_[base].insert(r);
    const std::vector<int32_t> ids = tensor_args(g_.nodes[r]);
    if (std::none_of(ids.begin(), ids.end(), [&](int32_t id) { return g_.root(id) == old_root; })) {
      root_readers_[old_root].erase(r);
    }
  }
}

void PatternGraph::remove(size_t i) {
  if (taken_[i]) throw CompileError("pattern pass: " + g_.describe_node(i) + " removed twice");
  taken_[i] = true;
}

bool PatternGraph::read_after_rewrite(int32_t v) const {
  const int32_t root = g_.root(v);
  for (size_t r : root_readers_[root]) {
    if (!taken_[r]) return true;
  }
  for (const auto& [anchor, native] : replacements_) {
    for (int32_t id : tensor_args(native)) {
      if (g_.root(id) == root) return true;
    }
  }
  return false;
}

size_t PatternGraph::read_instead(int32_t v, int32_t src) {
  const int32_t root = g_.root(v);
  const size_t moved = readers_[v].size();
  for (size_t r : readers_[v]) {
    rename_tensor_arg(g_.nodes[r], v, src);
    auto native = replacements_.find(r);
    if (native != replacements_.end()) rename_tensor_arg(native->second, v, src);
    readers_[src].insert(r);
    root_readers_[g_.root(src)].insert(r);
    const std::vector<int32_t> still = tensor_args(g_.nodes[r]);
    if (std::none_of(still.begin(), still.end(), [&](int32_t id) { return g_.root(id) == root; })) {
      root_readers_[root].erase(r);
    }
  }
  readers_[v].clear();
  return moved;
}

void PatternGraph::apply() {
  if (std::find(taken_.begin(), taken_.end(), true) == taken_.end()) return;
  std::vector<Node> nodes;
  nodes.reserve(g_.nodes.size());
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    auto r = replacements_.find(i);
    if (r != replacements_.end()) nodes.push_back(std::move(r->second));
    else if (!taken_[i]) nodes.push_back(std::move(g_.nodes[i]));
  }
  g_.nodes = std::move(nodes);
  replacements_.clear();
}

}  // namespace neuroncompiler
