// What the fallback knows about an op, computed once per operator schema:
// its name, how it must run, which arguments it writes, its out= overload,
// its cache of output layouts and its counters.
#pragma once

#include <atomic>
#include <optional>
#include <string>

#include <ATen/core/dispatch/Dispatcher.h>

#include "csrc/aten/ForeachElements.h"
#include "csrc/aten/MetaInference.h"
#include "csrc/aten/OpStats.h"

namespace torchneuron {

enum class Mode : uint8_t {
  kAsync,    // queued (after a synchronous first run per argument signature)
  kSync,     // always synchronous: the op returns non-tensors
  kCpuCopy,  // forced onto the copy-to-CPU path (TORCHNEURON_CPU_FALLBACK_OPS)
};

struct OpPlan {
  std::string name;              // "aten::add.Tensor"
  std::atomic<Mode> mode{Mode::kAsync};
  bool has_mutable_arg = false;  // in-place / out= ops write an argument
  // Whether a CPU call reaches a kernel (its own or a composite one): ops
  // PyTorch implements for CUDA only have none, and are refused by name.
  bool has_cpu_kernel = true;
  SchemaFacts facts;             // written-argument returns, generator arguments
  InferenceCache layouts;        // output layouts by argument signature
  OpCounter* counter = nullptr;  // executed_ops() counts
  // The op's out= overload, when it has one with the same arguments: fresh
  // outputs are then written by the CPU kernel in place, with no copy.
  std::optional<c10::OperatorHandle> out_op;
  // For a functional foreach op: its element op's out= overload, which
  // writes each fresh device output directly (csrc/aten/ForeachElements.h).
  std::optional<ElementOut> element_out;
  // An elementwise foreach op: queued, it may join the foreach ops queued
  // before it into one pass over memory (csrc/aten/ForeachChain.h).
  bool foreach_chain = false;
  std::atomic<bool> out_op_ok{true};  // false once out_op's or element_out's kernel used `out` as scratch
  // How big the op's work is, for whether its CPU kernel gets the worker's
  // OpenMP team (csrc/runtime/WorkerThreads.h): matrix products and
  // convolutions have more work than their operands; gathers (embedding,
  // index_select) touch only their output of a large table; in-place
  // scatters (index_copy_ into a KV cache) only their source.
  bool matrix_work = false;
  enum class WorkSize : uint8_t { kLargestTensor, kOutputs, kReadArguments };
  WorkSize work_size = WorkSize::kLargestTensor;
};

// The plan of an op (built on first use; thread-safe; never freed).
OpPlan& plan_for(const c10::OperatorHandle& op);

}  // namespace torchneuron
