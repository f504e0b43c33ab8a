#include "neuroncompiler/compile.hpp"

#include <chrono>
#include <map>

#include "neuroncompiler/fusion.hpp"
#include "neuroncompiler/graph_format.hpp"
#include "neuroncompiler/memory_plan.hpp"
#include "neuroncompiler/native_ops.hpp"
#include "neuroncompiler/patterns.hpp"
#include "neuroncompiler/reinplace.hpp"
#include "neuroncompiler/simplify.hpp"
#include "neuroncompiler/tile_lowering.hpp"

namespace neuroncompiler {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int64_t buffer_bytes(const Layout& l) { return l.extent() * dtype_size(l.dtype); }

}  // namespace

Program compile_graph(const Graph& graph, CompileReport* report, const CompileOptions& options) {
  CompileReport local;
  CompileReport& rep = report ? *report : local;
  auto t0 = Clock::now();
  Graph g = graph;
  rep.folded = rewrite_patterns(g, options.patterns).folded;
  simplify_functionalized_updates(g);
  rep.reinplaced = reinplace(g);
  lower_index_copies(g);
  lower_integer_arithmetic(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    // The device's own ops (its fused attention) have no CPU kernel for an
    // extern call: the pattern pass must have taken them.
    if (g.nodes[i].op.find("_overrideable") != std::string::npos) {
      throw NotLowered(g.describe_node(i) + ": the device's kernel does not take its arguments here");
    }
  }
  rep.patterns_ms = ms_since(t0);
  if (rep.keep_ir) rep.ir_patterns = format_graph(g);

  t0 = Clock::now();
  const Schedule schedule = fuse(g);
  rep.fusion_ms = ms_since(t0);
  if (rep.keep_ir) rep.ir_fusion = describe_schedule(g, schedule);

  t0 = Clock::now();
  Program p;
  p.inputs = g.inputs;
  p.input_names = g.input_names;
  p.outputs = g.outputs;
  p.values.resize(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) p.values[v].layout = g.values[v].layout;
  for (const ScheduledStep& ss : schedule.steps) {
    Step step;
    if (ss.kind == ScheduledStep::Kind::kFused) {
      const FusedGroup& group = schedule.groups[ss.group];
      step.kind = Step::Kind::kFused;
      step.tiles = lower_group(g, schedule, group);
      step.graph_nodes = static_cast<int32_t>(group.nodes.size());
      ++rep.fused_groups;
      rep.fused_nodes += step.graph_nodes;
    } else if (is_native_op(g.nodes[ss.node].op)) {
      step.kind = Step::Kind::kNative;
      step.node = g.nodes[ss.node];
      step.graph_nodes = step.node.replaces;
      step.node.replaces = 1;  // the step carries the count (Program's byte format)
      ++rep.native_kernels;
      rep.native_nodes += step.graph_nodes;
    } else {
      step.kind = Step::Kind::kExtern;
      step.node = g.nodes[ss.node];
      step.graph_nodes = step.node.replaces;  // more than 1 for a pattern's library call
      step.node.replaces = 1;
      ++rep.extern_calls;
      rep.library_calls += is_library_call(step.node.op);
    }
    p.steps.push_back(std::move(step));
  }
  rep.lowering_ms = ms_since(t0);

  // Buffers: inputs, then output storages (buffers under graph outputs), then
  // the arena for every other materialized value.
  t0 = Clock::now();
  std::vector<int32_t> buffer_of(g.values.size(), -1);
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const int32_t v = g.inputs[i];
    if (buffer_of[v] >= 0) continue;
    buffer_of[v] = static_cast<int32_t>(p.buffers.size());
    p.buffers.push_back({Buffer::Kind::kInput, static_cast<int64_t>(i), buffer_bytes(g.value(v).layout)});
  }
  for (int32_t out : g.outputs) {
    if (out < 0) continue;
    const int32_t root = g.root(out);
    if (buffer_of[root] >= 0) continue;
    buffer_of[root] = static_cast<int32_t>(p.buffers.size());
    const int64_t bytes = buffer_bytes(g.value(root).layout);
    p.buffers.push_back({Buffer::Kind::kOutput, static_cast<int64_t>(p.output_storage_bytes.size()), bytes});
    p.output_storage_bytes.push_back(bytes);
  }
  // Lifetimes over steps: written at the defining step, read until the last reader.
  std::vector<int32_t> first(g.values.size(), -1), last(g.values.size(), -1);
  auto touch = [&](int32_t id, int32_t step) {
    const int32_t root = g.root(id);
    if (first[root] < 0) first[root] = step;
    last[root] = std::max(last[root], step);
  };
  for (size_t si = 0; si < p.steps.size(); ++si) {
    const Step& s = p.steps[si];
    const auto step = static_cast<int32_t>(si);
    if (s.kind == Step::Kind::kFused) {
      for (const TileOperand& o : s.tiles.operands) touch(o.value, step);
    } else {
      for (const Arg& a : s.node.args) {
        if (a.kind == Arg::Kind::kTensor) touch(static_cast<int32_t>(a.i), step);
        if (a.kind == Arg::Kind::kTensorList) for (int64_t id : a.ints) if (id >= 0) touch(static_cast<int32_t>(id), step);
      }
      for (int32_t o : s.node.outputs) if (o >= 0) touch(o, step);
    }
  }
  std::vector<BufferRequest> requests;
  std::vector<int32_t> requested;
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (g.values[v].is_view() || buffer_of[v] >= 0 || !schedule.materialized[v] || first[v] < 0) continue;
    requests.push_back({buffer_bytes(g.values[v].layout), first[v], last[v]});
    requested.push_back(static_cast<int32_t>(v));
  }
  const MemoryPlan plan = plan_memory(requests);
  for (size_t r = 0; r < requests.size(); ++r) {
    buffer_of[requested[r]] = static_cast<int32_t>(p.buffers.size());
    p.buffers.push_back({Buffer::Kind::kArena, plan.offsets[r], requests[r].nbytes});
  }
  p.arena_bytes = plan.arena_bytes;
  for (size_t v = 0; v < g.values.size(); ++v) p.values[v].buffer = buffer_of[g.root(static_cast<int32_t>(v))];
  // Extern and native results nobody reads have no buffer: the step discards them.
  for (Step& s : p.steps) {
    if (s.kind == Step::Kind::kFused) continue;
    for (int32_t& o : s.node.outputs) if (o >= 0 && p.values[o].buffer < 0) o = -1;
  }
  rep.planning_ms = ms_since(t0);
  rep.arena_bytes = p.arena_bytes;
  p.folded = rep.folded;
  p.reinplaced = rep.reinplaced;
  return p;
}

Program compile_text(std::string_view text, CompileReport* report, const CompileOptions& options) {
  const auto t0 = Clock::now();
  const Graph g = parse_graph(text);
  const double parse_ms = ms_since(t0);
  Program p = compile_graph(g, report, options);
  if (report) report->parse_ms = parse_ms;
  return p;
}

}  // namespace neuroncompiler
