// What the pattern pass asks of a graph while it matches: producers and
// readers of values, whether an intermediate is read by nothing outside a
// candidate subgraph, and the bookkeeping of replaced nodes (applied to the
// graph at the end, so indices stay valid while matching).
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

class PatternGraph {
 public:
  explicit PatternGraph(Graph& graph);

  const Graph& graph() const { return g_; }
  const Node& node(size_t i) const { return g_.nodes[i]; }
  static bool is_tensor(const Arg& a) { return a.kind == Arg::Kind::kTensor; }
  static int32_t id(const Arg& a) { return is_tensor(a) ? static_cast<int32_t>(a.i) : -1; }

  // The node computing value `v` (not a view), unless it was taken by a pattern.
  std::optional<size_t> producer(int32_t v) const;
  // The one node reading value `v` (an owning value read by one node, through
  // no view), unless taken.
  std::optional<size_t> sole_reader(int32_t v) const;
  // `v` owns its buffer and only these nodes read it (directly or through
  // views); it is neither an input nor under a graph output.
  bool only_read_by(int32_t v, std::initializer_list<size_t> nodes) const;
  // Every node reading `v` or its views.
  const std::set<size_t>& readers(int32_t v) const { return root_readers_[g_.root(v)]; }
  // An input, or under a graph output.
  bool pinned(int32_t v) const { return pinned_[g_.root(v)]; }
  // _to_copy changing the dtype only (same sizes, no device or layout change).
  bool is_plain_cast(size_t i) const;
  // `l` broadcasts to `sizes` (right-aligned, size 1 or equal).
  static bool broadcasts_to(const Layout& l, const std::vector<int64_t>& sizes);

  bool taken(size_t i) const { return taken_[i]; }
  // Replaces `nodes` (none taken yet) by `native`, placed where `anchor` was.
  void replace(const std::vector<size_t>& nodes, size_t anchor, Node native);
  int replaced_nodes() const { return replaced_; }
  // Removes node `i`, whose result `v` its readers now take as `constant`.
  void fold_constant(size_t i, int32_t v, const Arg& constant);
  // Removes node `i`, whose result `v` has `src`'s values and layout: its
  // readers read `src`, its views view `src`'s buffer, a graph output of `v`
  // becomes `src`. `src` owns its buffer and only node `i` reads it.
  void alias(size_t i, int32_t v, int32_t src);
  // What reads or views `v`, or returns it, takes `src` instead (the same
  // layout): a node writing `v`'s values into `src` in place stands for the
  // one that computed `v`.
  void take_over(int32_t v, int32_t src);
  // The nodes reading value `v` itself (a view whose elements `src` holds in
  // the same logical order) read `src` instead; `v` stays, for other views.
  // Returns how many nodes it moved.
  size_t read_instead(int32_t v, int32_t src);
  // View `v` now views `base`'s buffer (an owning value defined before it)
  // with `layout`; its readers move with it.
  void rebase(int32_t v, int32_t base, const Layout& layout);
  // Removes node `i` (its results must have no readers left).
  void remove(size_t i);
  // A node not taken, or a replacement, reads `v` or its views.
  bool read_after_rewrite(int32_t v) const;
  // Rewrites the graph's node list.
  void apply();

 private:
  Graph& g_;
  std::vector<int32_t> producer_;               // per value: node index or -1
  std::vector<std::set<size_t>> root_readers_;  // per owning value: readers of it or its views
  std::vector<std::set<size_t>> readers_;       // per value id: readers of exactly that id
  std::vector<bool> pinned_;                    // per owning value: an input or under an output
  std::vector<bool> taken_;
  std::map<size_t, Node> replacements_;
  int replaced_ = 0;
};

}  // namespace neuroncompiler
