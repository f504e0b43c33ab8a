// Simplifications of what a functionalized graph writes for an accumulator
// that starts at zero (`acc = torch.zeros(...)`, then `acc[:n].addmm_(a, b)`,
// as TRL's fused LM head accumulates its gradients): AOTAutograd turns it into
// a zero fill, an addmm reading a view of it, and a slice_scatter of the
// result back into the fill. Run after the pattern pass (patterns.hpp), so its
// mixed-precision products (addmm.dtype) are simplified too:
//  - addmm / addmm.dtype of a zero fill with alpha 1 (and a finite beta): the
//    product alone (mm / mm.dtype), which neither reads nor first copies the
//    accumulator;
//  - slice_scatter whose source has the result's sizes (it covers the whole
//    base): the source itself, which its readers and views now read (no copy);
//    only for a source that owns its buffer, is read by nothing else and is no
//    input or output;
//  - zero fills nothing reads any more: gone.
// The results are the values the graph computes, up to the sign of a zero.
#pragma once

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

struct SimplifyReport {
  int zero_accumulators = 0;  // addmm of zeros run as the product alone
  int whole_scatters = 0;     // slice_scatter over a whole base replaced by its source
  int dead_fills = 0;         // zero fills left without readers, removed
};

SimplifyReport simplify_accumulators(Graph& graph);

}  // namespace neuroncompiler
