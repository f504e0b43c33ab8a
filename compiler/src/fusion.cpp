#include "neuroncompiler/fusion.hpp"

#include <algorithm>
#include <set>

#include "neuroncompiler/pointwise_ops.hpp"
#include "neuroncompiler/reinplace.hpp"

namespace neuroncompiler {
namespace {

struct OpenGroup {
  bool open = true;
  std::set<int32_t> produced;  // values computed by members
  std::set<int32_t> loaded;    // buffers (root values) the group reads from memory
};

std::vector<int32_t> tensor_args(const Node& n) {
  std::vector<int32_t> ids;
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::kTensor) ids.push_back(static_cast<int32_t>(a.i));
    if (a.kind == Arg::Kind::kTensorList) {
      for (int64_t id : a.ints) if (id >= 0) ids.push_back(static_cast<int32_t>(id));
    }
  }
  return ids;
}

}  // namespace

Schedule fuse(const Graph& g) {
  Schedule s;
  const size_t n_nodes = g.nodes.size();
  std::vector<int32_t> group_of_node(n_nodes, -1);
  std::vector<int32_t> group_of_value(g.values.size(), -1);  // producer group of a root value
  std::vector<OpenGroup> state;

  auto seal = [&](int32_t gi) { if (gi >= 0) state[gi].open = false; };

  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = g.nodes[i];
    const std::vector<int32_t> args = tensor_args(n);
    const bool copy_into = n.op == kCopyInto;
    // Groups that read a buffer this node overwrites must run before it.
    // So must the group writing that buffer (an intermediate that a scatter
    // writes into in place, reinplace.hpp): nothing may join it afterwards.
    if (writes_first_argument(n)) {
      const int32_t dst = g.root(static_cast<int32_t>(n.args[0].i));
      for (auto& st : state) if (st.open && st.loaded.count(dst)) st.open = false;
      seal(group_of_value[dst]);
    }
    const auto reduction = as_last_dim_reduction(g, n);
    const bool fusable = reduction.has_value() || is_pointwise(g, n);
    if (!fusable) {
      for (int32_t id : args) seal(group_of_value[g.root(id)]);
      continue;
    }
    std::vector<int64_t> shape;
    if (reduction) shape = g.value(reduction->input).layout.sizes;
    else if (copy_into) shape = g.value(static_cast<int32_t>(n.args[0].i)).layout.sizes;
    else shape = g.value(n.outputs[0]).layout.sizes;

    // Join the open group of an operand computed over the same shape and read
    // directly (a view of a group's value would read memory the group writes).
    int32_t join = -1;
    for (int32_t id : args) {
      const int32_t gi = group_of_value[g.root(id)];
      if (gi >= 0 && state[gi].open && id == g.root(id) && s.groups[gi].shape == shape) {
        join = gi;
        break;
      }
    }
    if (join >= 0) {
      for (int32_t id : args) {
        if (group_of_value[g.root(id)] == join && id != g.root(id)) join = -1;
      }
    }
    if (join < 0) {
      join = static_cast<int32_t>(s.groups.size());
      s.groups.push_back({{}, shape, false});
      state.push_back({});
    }
    // Other groups whose values this node reads are now read from memory.
    for (int32_t id : args) {
      const int32_t gi = group_of_value[g.root(id)];
      if (gi != join) seal(gi);
      if (!state[join].produced.count(id)) state[join].loaded.insert(g.root(id));
    }
    s.groups[join].nodes.push_back(i);
    group_of_node[i] = join;
    for (int32_t out : n.outputs) {
      if (out >= 0) {
        state[join].produced.insert(out);
        group_of_value[out] = join;
      }
    }
    if (reduction || copy_into) {
      s.groups[join].reduces = reduction.has_value();
      seal(join);
    }
  }

  // Steps in graph order, each group where its last member was.
  std::vector<size_t> last_member(s.groups.size());
  for (size_t gi = 0; gi < s.groups.size(); ++gi) last_member[gi] = s.groups[gi].nodes.back();
  for (size_t i = 0; i < n_nodes; ++i) {
    const int32_t gi = group_of_node[i];
    if (gi < 0) s.steps.push_back({ScheduledStep::Kind::kNode, -1, i});
    else if (last_member[gi] == i) s.steps.push_back({ScheduledStep::Kind::kFused, gi, i});
  }

  // Materialized: a value read outside its group, a graph output (or the
  // buffer under one), every result of a node of its own that someone reads.
  s.materialized.assign(g.values.size(), false);
  std::vector<bool> read(g.values.size(), false);
  for (size_t i = 0; i < n_nodes; ++i) {
    for (int32_t id : tensor_args(g.nodes[i])) {
      const int32_t root = g.root(id);
      read[root] = true;
      const int32_t producer = group_of_value[root];
      if (producer >= 0 && (group_of_node[i] != producer || id != root)) s.materialized[root] = true;
      if (producer < 0) s.materialized[root] = true;  // an input or a node's result
    }
  }
  for (int32_t out : g.outputs) {
    if (out >= 0) s.materialized[g.root(out)] = true;
  }
  for (int32_t in : g.inputs) s.materialized[in] = true;
  for (size_t i = 0; i < n_nodes; ++i) {
    if (group_of_node[i] >= 0) continue;
    for (int32_t out : g.nodes[i].outputs) {
      if (out >= 0 && read[out]) s.materialized[out] = true;
    }
  }
  return s;
}

std::string describe_schedule(const Graph& g, const Schedule& s) {
  std::string out = "schedule: " + std::to_string(s.steps.size()) + " steps, " + std::to_string(s.groups.size()) +
                    " fused groups\n";
  auto values = [&](const Node& n) {
    std::string v;
    for (int32_t o : n.outputs) v += " %" + std::to_string(o);
    return v;
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const ScheduledStep& st = s.steps[i];
    if (st.kind == ScheduledStep::Kind::kNode) {
      out += "  step " + std::to_string(i) + ": " + g.describe_node(st.node) + " ->" + values(g.nodes[st.node]) + "\n";
      continue;
    }
    const FusedGroup& group = s.groups[static_cast<size_t>(st.group)];
    out += "  step " + std::to_string(i) + ": fused group" + (group.reduces ? " (reduces)" : "") + " over [";
    for (size_t d = 0; d < group.shape.size(); ++d) out += (d ? "," : "") + std::to_string(group.shape[d]);
    out += "]\n";
    for (size_t n : group.nodes) out += "    " + g.describe_node(n) + " ->" + values(g.nodes[n]) + "\n";
  }
  return out;
}

}  // namespace neuroncompiler
