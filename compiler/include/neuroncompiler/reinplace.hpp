// Re-inplacing: AOTAutograd functionalizes an in-place update of a graph
// input (a KV cache's `index_copy_`, `cache[:, :, pos] = v`) into a
// functional op that copies the whole input, followed by a copy of the result
// back into the input. Where nothing reads the input between the two and
// nothing else writes it, the op runs in place on the input instead (its
// in-place ATen variant), its result becomes a view of the input and the copy
// back disappears: a decode step no longer copies every cache twice.
// Likewise slice_scatter / select_scatter into an intermediate that nothing
// reads afterwards: `src` is copied into the slice of `self` in place (a
// kCopyInto into a view of it) and the result views `self`, instead of a copy
// of all of `self` with the slice replaced.
#pragma once

#include <optional>

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

// Nodes rewritten.
int reinplace(Graph& graph);

// The view of `base` that slice_scatter (dim, start, end, step) or
// select_scatter (dim, index) writes, as Python slicing normalizes the bounds;
// nullopt for arguments it does not take.
std::optional<Layout> scattered_view(const Node& scatter, const Layout& base);

// Whether the node writes its first argument's buffer: an input mutation
// (kCopyInto) or an in-place op with no outputs ("aten::index_put_...").
bool writes_first_argument(const Node& node);

}  // namespace neuroncompiler
