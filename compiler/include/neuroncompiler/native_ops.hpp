// Native steps: the device's own kernels (kernels/: attention, row norms,
// rotary embedding) run inside a program straight on its buffers, in place
// of ATen nodes or whole subgraphs that the pattern pass (patterns.hpp)
// recognized. Each native op is a Node whose op name starts with "neuron::";
// its arguments are value ids (kTensor, or kNone for an absent operand) and
// scalars, its outputs value ids (-1: not wanted).
#pragma once

#include <string_view>

#include "neuroncompiler/executor.hpp"
#include "neuroncompiler/program.hpp"

namespace neuroncompiler {

// args (q, k, v, mask|none, causal b, scale f); outputs (out, lse, seed, offset):
// lse float32 [B, Hq, L]; seed and offset (int64 scalars a training graph
// saves for the backward; no dropout here) are written as 0.
inline constexpr std::string_view kNativeAttention = "neuron::attention";
// args (grad_out, q, k, v, mask|none, out, lse, causal b, scale f);
// outputs (dq, dk, dv).
inline constexpr std::string_view kNativeAttentionBackward = "neuron::attention_backward";
// args (x, weight|none, bias|none, eps f, subtract_mean b, normalized dtype i
// (-1: no rounding before the weight)); outputs (y, mean, rstd). x and y are
// rows of the last dimension (neuronkernels/norm.hpp).
inline constexpr std::string_view kNativeRowNorm = "neuron::row_norm";
// args (x, cos, sin); outputs (out) (neuronkernels/rope.hpp).
inline constexpr std::string_view kNativeRope = "neuron::rope";
// args (grad_out, cos, sin); outputs (grad_x): the rotary embedding's
// gradient (RopeParams::backward).
inline constexpr std::string_view kNativeRopeBackward = "neuron::rope_backward";
// args (self, index, source, dim i); no outputs: writes self in place (a
// static KV cache's update), self[..., index[j], ...] = source[..., j, ...]
// along dim, as index_copy_ and index_put_ with one index tensor do.
inline constexpr std::string_view kNativeIndexCopy = "neuron::index_copy_";

// args (self, grad, indices, padding_idx i); no outputs: self +=
// embedding_dense_backward(grad, indices, rows, padding_idx) in place, float32,
// without scaling by frequency (a tied embedding's weight gradient: the LM
// head's plus the embedding's). Each row's gradient is summed from zero in
// token order, then added into self's row, as the eager kernel
// (csrc/aten/native/Compat.cpp) and the add compute it; the rows no token
// reads are not touched.
inline constexpr std::string_view kNativeEmbeddingBackwardAdd = "neuron::embedding_backward_add_";

// args (a tensor|int, b tensor|int, alpha i, subtract b); outputs (out): exact
// integer a + alpha * b (or a - alpha * b) in out's dtype (int64 or int32),
// operands broadcast to out's shape. A KV cache's position arithmetic
// (`cache_position + cumulative_length`): the tile interpreter computes in
// float32, exact to 2^24 only.
inline constexpr std::string_view kNativeIntAdd = "neuron::int_add";
// args (dst, src); no outputs: dst = src (src broadcast), one integer dtype,
// exactly (an integer input's update, e.g. the cache's fill level).
inline constexpr std::string_view kNativeIntCopy = "neuron::int_copy_";

// Rewrites integer add/sub (int64, int32) and integer copies into inputs
// into the exact native ops above. Returns how many it rewrote.
int lower_integer_arithmetic(Graph& graph);

// Rewrites the in-place index_put_ / index_copy_ nodes (reinplace.hpp makes
// them) that write whole slices along one dimension from one int64 index
// vector into native index copies. Returns how many it rewrote.
int lower_index_copies(Graph& graph);

bool is_native_op(std::string_view op);

// Runs a native step. Throws std::runtime_error / CompileError naming what is
// wrong; the caller names the step.
void run_native(const Program& program, const RunBuffers& buffers, const Step& step,
                const neuronkernels::ParallelFor& parallel_for);

}  // namespace neuroncompiler
