// The serialized graph: what Python writes from an AOTAutograd FX graph
// (python/torchneuron/compile/serialize.py) and the compiler parses. Text,
// one record per line, whitespace-separated tokens:
//
//   neurongraph 1                      version line (kGraphFormatVersion)
//   value <id> <dtype> <base|-> <offset> <ndim> <sizes...> <strides...>
//   input <id> <name>
//   node <op> <n_out> <out|_>... <n_args> <arg>...
//   output <id|_>...
//   end
//
// Arguments: %<id> tensor, i<int>, f<float>, b0/b1, _ (None), I<int,...>
// int list, F<float,...> float list, T<%id|_,...> tensor list, D<index>
// device, s<text> string (no whitespace).
#pragma once

#include <string>
#include <string_view>

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

inline constexpr int kGraphFormatVersion = 1;

// Parses and validates; throws CompileError naming the line and token.
Graph parse_graph(std::string_view text);

// The text parse_graph reads back to an equal graph.
std::string format_graph(const Graph& graph);

}  // namespace neuroncompiler
