// Foreach chains: consecutive elementwise foreach ops that wait together in a
// stream's queue run as one pass over memory.
//
// An optimizer's default step on neuron is a handful of foreach ops over the
// same lists (AdamW: _foreach_mul_, _foreach_lerp_, _foreach_mul_,
// _foreach_addcmul_, _foreach_sqrt, _foreach_div_, _foreach_add_,
// _foreach_addcdiv_). Run one after another, each streams every parameter,
// gradient and moment through memory again: for a model larger than the
// caches, the step reads and writes its state about twenty times. Queued
// while the device is still busy (the host runs ahead), an op joins the
// foreach ops queued before it (neuronrt::JoinableWork) when every list
// tensor is contiguous, the tensors at one list position have one shape, and
// tensors at different positions share no memory. The chain then cuts the
// lists into pieces of about kPieceBytes across its ops and runs every op on
// a piece while it is in cache, pieces split among the worker's threads.
// Each op still runs its own ATen CPU kernel, on views of the pieces, so
// every element goes through the same kernels in the same order as unchained:
// results are the same, bit for bit.
//
// Not chained: reductions (_foreach_norm, _foreach_max), ops with a
// per-list-position tensor of scalars, copies between devices, anything
// while the profiler runs (it times each op), and the first run of an
// argument signature (synchronous, csrc/aten/Fallback.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

#include "csrc/aten/ForeachElements.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

// Working set of one piece across a chain's ops: two threads' pieces stay in
// the second-level caches of most CPUs.
constexpr int64_t kPieceBytes = int64_t{1} << 20;

// Whether the op (by its name, "aten::_foreach_mul_.Scalar") is an
// elementwise foreach op that a chain may take.
bool chainable_foreach(const std::string& op_name);

// The memory layout of one foreach call, when it can join a chain: the
// element count at each list position and the byte ranges its device
// tensors cover. Computed on the neuron tensors before the call is queued.
struct ChainLayout {
  struct Range {
    uintptr_t begin, end;
    int64_t position;  // list position, or -1 for a 0-dim tensor every position reads
  };
  std::vector<int64_t> numels;  // per list position
  std::vector<Range> ranges;    // sorted by begin
};

// The layout of a call with these arguments (neuron tensors; `outs` the fresh
// outputs of a functional op), or nullopt when it cannot join a chain.
std::optional<ChainLayout> chain_layout(const torch::jit::Stack& args, const std::vector<at::Tensor>& outs);

// One queued foreach call as chain work: `cpu_args` its arguments as its CPU
// kernel sees them (queued CPU aliases). In place: `op` is the foreach op.
// Functional: `element` is its element op's out= overload, writing `outs`
// (queued CPU aliases of the fresh outputs).
std::unique_ptr<neuronrt::JoinableWork> foreach_chain(
    const c10::OperatorHandle& op, const char* op_name, const ElementOut* element,
    torch::jit::Stack cpu_args, std::vector<at::Tensor> outs, ChainLayout layout);

}  // namespace torchneuron
