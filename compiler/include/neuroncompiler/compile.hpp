// The compiler's pipeline: a parsed graph -> pattern fusion into native ops ->
// accumulators that start at zero simplified -> re-inplacing -> elementwise fusion -> tile lowering -> memory planning -> a Program, with
// what each phase took.
#pragma once

#include <string>
#include <string_view>

#include "neuroncompiler/ir.hpp"
#include "neuroncompiler/patterns.hpp"
#include "neuroncompiler/program.hpp"

namespace neuroncompiler {

struct CompileReport {
  int fused_groups = 0;
  int fused_nodes = 0;     // graph nodes inside fused groups
  int extern_calls = 0;
  int library_calls = 0;   // extern calls of matrix products (oneDNN/MKL or the skinny matmul)
  int native_kernels = 0;  // steps run by the device's kernels (patterns.hpp)
  int native_nodes = 0;    // graph nodes inside them
  int folded = 0;          // scalar constants folded into fused groups (patterns.hpp)
  int reinplaced = 0;      // functional updates of inputs run in place (reinplace.hpp)
  int64_t arena_bytes = 0;
  double parse_ms = 0, patterns_ms = 0, fusion_ms = 0, lowering_ms = 0, planning_ms = 0;
  // Set keep_ir to get the IR after each pass (debug dumps): the graph after
  // pattern fusion and re-inplacing (graph text), and the fusion schedule.
  bool keep_ir = false;
  std::string ir_patterns, ir_fusion;
};

// What the program's target can run (a program's cache key must include it).
struct CompileOptions {
  PatternOptions patterns;
};

Program compile_graph(const Graph& graph, CompileReport* report = nullptr, const CompileOptions& options = {});

// parse_graph + compile_graph, timing the parse too.
Program compile_text(std::string_view graph_text, CompileReport* report = nullptr,
                     const CompileOptions& options = {});

}  // namespace neuroncompiler
