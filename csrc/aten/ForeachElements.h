// Functional foreach ops (`_foreach_sqrt`, `_foreach_add.List`) have no CPU
// kernel of their own, only a CompositeExplicitAutograd loop that calls the
// element op on each tensor, allocating each result in host memory, which
// the fallback then copies into the fresh device buffers. The element op's
// out= overload writes those buffers directly instead: one pass over the
// data instead of three, and no host memory faulted in at every call (Adam's
// `_foreach_sqrt` of its second moments ran at a third of the bandwidth of
// its in-place foreach ops).
#pragma once

#include <optional>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

namespace torchneuron {

struct ElementOut {
  c10::OperatorHandle op;             // the element op's out= overload, e.g. aten::sqrt.out
  std::vector<bool> per_element;      // whether foreach argument i is a list read per element
  std::vector<c10::IValue> defaults;  // the element op's arguments the foreach op lacks
};

// The element out= overload of a functional foreach op (one Tensor[] return,
// no written argument), with a CPU kernel: the same argument types, lists
// (Tensor[], Scalar[]) read per element, then defaulted arguments, then one
// out tensor. nullopt for other ops or when no overload matches.
std::optional<ElementOut> find_element_out(const c10::FunctionSchema& foreach_schema);

// Runs the element op once per element on the worker: `cpu_args` are the
// foreach op's arguments as the CPU kernel sees them, `outs` resizable CPU
// aliases of the fresh device outputs and `expected` plain ones (see
// copy_moved_outputs, csrc/aten/CpuKernelCall.h). Returns false if a kernel
// moved an output; its result has then been copied in.
bool run_element_outs(const ElementOut& element, const torch::jit::Stack& cpu_args,
                      const std::vector<at::Tensor>& outs, const std::vector<at::Tensor>& expected);

}  // namespace torchneuron
