// Simplifications of what a functionalized graph writes for updates of a
// buffer in place. An accumulator that starts at zero (`acc = torch.zeros(...)`,
// then `acc[:n].addmm_(a, b)`, as TRL's fused LM head accumulates its
// gradients) becomes a zero fill, an addmm reading a view of it, and a
// slice_scatter of the result back into the fill; a product written into part
// of a larger buffer (`torch.mm(a, b, out=buf[:, :m])`, TRL's logits tiles)
// becomes a slice_scatter into the buffer, read back through slices. Run after
// the pattern pass (patterns.hpp), so its mixed-precision products
// (addmm.dtype) are simplified too:
//  - addmm / addmm.dtype of a zero fill with alpha 1 (and a finite beta): the
//    product alone (mm / mm.dtype), which neither reads nor first copies the
//    accumulator;
//  - slice_scatter whose source has the result's sizes (it covers the whole
//    base): the source itself, which its readers and views now read (no copy);
//    only for a source that owns its buffer, is read by nothing else and is no
//    input or output;
//  - a view of a slice_scatter's result that lies in the region it wrote (a
//    slice, transpose or unsqueeze of it): a view of the scatter's source
//    (unless a node writes the source's buffer, an input);
//  - fills, empties, scatters and copies nothing reads any more: gone (a
//    chain of them at once).
// The results are the values the graph computes, up to the sign of a zero.
#pragma once

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

struct SimplifyReport {
  int zero_accumulators = 0;  // addmm of zeros run as the product alone
  int whole_scatters = 0;     // slice_scatter over a whole base replaced by its source
  int scattered_views = 0;    // views of a scatter's region made views of its source
  int dead_nodes = 0;         // fills, scatters and copies left without readers, removed
};

SimplifyReport simplify_functionalized_updates(Graph& graph);

}  // namespace neuroncompiler
