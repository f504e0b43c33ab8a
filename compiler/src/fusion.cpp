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
  std::set<int32_t> viewed;    // those of them it reads through a view
};

}  // namespace

Schedule fuse(const Graph& g) {
  Schedule s;
  const size_t n_nodes = g.nodes.size();
  std::vector<int32_t> group_of_node(n_nodes, -1);
  std::vector<int32_t> group_of_value(g.values.size(), -1);  // producer group of a root value
  // The open group that copies into a root value (an input it overwrites): it
  // runs where its last member is, so a reader outside it must seal it first.
  std::vector<int32_t> group_writing(g.values.size(), -1);
  std::vector<OpenGroup> state;

  auto seal = [&](int32_t gi) { if (gi >= 0) state[gi].open = false; };
  // Moves group `from`'s members into group `into` (both open, one shape);
  // `from` is left empty and dropped at the end.
  auto merge_into = [&](int32_t into, int32_t from) {
    std::vector<size_t>& nodes = s.groups[into].nodes;
    for (size_t node : s.groups[from].nodes) {
      nodes.push_back(node);
      group_of_node[node] = into;
      for (int32_t out : g.nodes[node].outputs) {
        if (out >= 0) group_of_value[out] = into;
      }
    }
    std::sort(nodes.begin(), nodes.end());
    std::replace(group_writing.begin(), group_writing.end(), from, into);
    s.groups[from].nodes.clear();
    state[into].produced.insert(state[from].produced.begin(), state[from].produced.end());
    state[into].loaded.insert(state[from].loaded.begin(), state[from].loaded.end());
    state[into].viewed.insert(state[from].viewed.begin(), state[from].viewed.end());
    state[from] = OpenGroup{false, {}, {}, {}};
  };

  for (size_t i = 0; i < n_nodes; ++i) {
    const Node& n = g.nodes[i];
    const std::vector<int32_t> args = tensor_args(n);
    const bool copy_into = n.op == kCopyInto;
    // Groups that read a buffer this node overwrites must run before it.
    // So must the group writing that buffer (an intermediate that a scatter
    // writes into in place, reinplace.hpp): nothing may join it afterwards.
    // Except the group that computed a copy's source from the whole buffer the
    // copy overwrites (x.copy_(f(x))): ended by the copy, it reads each tile of
    // the buffer before it writes the same elements back.
    if (writes_first_argument(n)) {
      const int32_t dst = g.root(static_cast<int32_t>(n.args[0].i));
      int32_t in_place = -1;
      if (copy_into && n.args[0].i == dst && n.args.size() > 1 && n.args[1].kind == Arg::Kind::kTensor &&
          is_pointwise(g, n)) {
        const int32_t src = static_cast<int32_t>(n.args[1].i);
        const int32_t gi = group_of_value[g.root(src)];
        if (gi >= 0 && src == g.root(src) && state[gi].open && !state[gi].viewed.count(dst) &&
            s.groups[gi].shape == g.value(dst).layout.sizes) {
          in_place = gi;
        }
      }
      for (size_t gi = 0; gi < state.size(); ++gi) {
        if (state[gi].open && state[gi].loaded.count(dst) && static_cast<int32_t>(gi) != in_place) {
          state[gi].open = false;
        }
      }
      seal(group_of_value[dst]);
      if (group_writing[dst] != in_place) seal(group_writing[dst]);
    }
    const auto reduction = as_last_dim_reduction(g, n);
    const bool fusable = reduction.has_value() || is_pointwise(g, n);
    if (!fusable) {
      for (int32_t id : args) {
        seal(group_of_value[g.root(id)]);
        seal(group_writing[g.root(id)]);
      }
      continue;
    }
    std::vector<int64_t> shape;
    if (reduction) shape = g.value(reduction->input).layout.sizes;
    else if (copy_into) shape = g.value(static_cast<int32_t>(n.args[0].i)).layout.sizes;
    else shape = g.value(n.outputs[0]).layout.sizes;

    // Join the open groups of operands computed over the same shape and read
    // directly (a view of a group's value would read memory the group writes).
    // When operands come from several such groups, they become one: an open
    // group's values have no reader outside it yet and nothing has overwritten
    // what it loads, so it may run later, with the others, at this node.
    std::vector<int32_t> joined;
    for (int32_t id : args) {
      const int32_t gi = group_of_value[g.root(id)];
      if (gi < 0 || !state[gi].open || s.groups[gi].shape != shape) continue;
      if (std::find(joined.begin(), joined.end(), gi) == joined.end()) joined.push_back(gi);
    }
    for (int32_t id : args) {
      if (id == g.root(id)) continue;
      // Through a view, element i reads another element of the buffer: not in
      // the group that computes or overwrites that buffer tile by tile.
      joined.erase(std::remove(joined.begin(), joined.end(), group_of_value[g.root(id)]), joined.end());
      joined.erase(std::remove(joined.begin(), joined.end(), group_writing[g.root(id)]), joined.end());
    }
    int32_t join = -1;
    if (!joined.empty()) {
      std::sort(joined.begin(), joined.end());
      join = joined[0];
      for (size_t k = 1; k < joined.size(); ++k) merge_into(join, joined[k]);
    }
    if (join < 0) {
      join = static_cast<int32_t>(s.groups.size());
      s.groups.push_back({{}, shape, false});
      state.push_back({});
    }
    // Other groups whose values this node reads are now read from memory,
    // and so are buffers other groups copied into.
    for (int32_t id : args) {
      const int32_t gi = group_of_value[g.root(id)];
      if (gi != join) seal(gi);
      if (group_writing[g.root(id)] != join) seal(group_writing[g.root(id)]);
      if (!state[join].produced.count(id)) state[join].loaded.insert(g.root(id));
      if (id != g.root(id)) state[join].viewed.insert(g.root(id));
    }
    s.groups[join].nodes.push_back(i);
    group_of_node[i] = join;
    for (int32_t out : n.outputs) {
      if (out >= 0) {
        state[join].produced.insert(out);
        group_of_value[out] = join;
      }
    }
    // A copy into a buffer leaves its group open: the copies of an optimizer's
    // parameter, moments and step then join the one group computing them.
    if (copy_into) group_writing[g.root(static_cast<int32_t>(n.args[0].i))] = join;
    if (reduction) {
      s.groups[join].reduces = true;
      seal(join);
    }
  }

  // Drop the groups emptied by merges (renumbering the others).
  std::vector<int32_t> renumber(s.groups.size(), -1);
  std::vector<FusedGroup> kept;
  for (size_t gi = 0; gi < s.groups.size(); ++gi) {
    if (s.groups[gi].nodes.empty()) continue;
    renumber[gi] = static_cast<int32_t>(kept.size());
    kept.push_back(std::move(s.groups[gi]));
  }
  s.groups = std::move(kept);
  for (int32_t& gi : group_of_node) if (gi >= 0) gi = renumber[gi];
  for (int32_t& gi : group_of_value) if (gi >= 0) gi = renumber[gi];

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
