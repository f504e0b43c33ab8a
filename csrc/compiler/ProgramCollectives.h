// Collectives inside compiled programs: torch's functional collectives
// (`_c10d_functional::all_reduce`, `all_gather_into_tensor`,
// `reduce_scatter_tensor`, `all_to_all_single`, `broadcast`, as DTensor and
// torch.distributed._functional_collectives put them in a graph) on a group whose neuron backend is
// ProcessGroupNeuron run as steps of the program's one task.
//
// Ordering. A group's collectives must run in the order they were issued on
// every rank, and they run one at a time on the group's queue. So when a
// program is launched, before its task is queued, each of its collectives
// takes a turn on its group's queue (ProcessGroupNeuron::enqueue_program_step),
// behind the collectives issued before the launch and ahead of those issued
// after it. When the program's task reaches the step, it hands the step to
// that turn (the step's input is ready: every earlier step has run) and waits
// for it; the turn, when the queue reaches it, waits for the program to get
// there (bounded by the group's timeout), runs the collective on the
// program's planned buffers and lets the program go on. Nothing waits on
// anything issued after it, so this cannot deadlock; the collective itself
// is neuroncoll's, with its checks (ranks calling different collectives,
// sizes or dtypes all get `mismatch:`) and its timeout.
//
// A program that fails before reaching a collective (or is never queued)
// cancels its turns: they run nothing, and the peers' collectives end at the
// group's timeout, as when a rank never issues an eager collective.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "csrc/compiler/ExternAtenCalls.h"
#include "neuroncompiler/program.hpp"

namespace torchneuron {

class CollectiveTurns;

class ProgramCollectives {
 public:
  // Finds the program's collective steps; throws c10::Error naming the step
  // for arguments it does not take (an unknown reduce op).
  explicit ProgramCollectives(const neuroncompiler::Program& program);

  bool empty() const { return steps_.empty(); }
  size_t size() const { return steps_.size(); }
  // Whether extern step `step` is a collective.
  bool is_collective(size_t step) const;

  // At a call, on the caller's thread, before the program's task is queued:
  // one turn per collective on its group's queue. Null when the program has
  // no collectives. Throws (nothing queued) for a group that is not a neuron
  // group, an aborted one, or another device than the group's.
  std::shared_ptr<CollectiveTurns> reserve(const neuroncompiler::Program& program,
                                           std::shared_ptr<ProgramStorages> storages,
                                           c10::DeviceIndex device) const;

  // True for the functional collective ops taken here, and for wait_tensor.
  static bool is_collective_op(const std::string& op);

  struct Step {
    size_t step = 0;
    enum class Kind { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast } kind = Kind::kAllReduce;
    std::string name;        // "all_reduce", ...
    std::string group_name;  // c10d's registered name of the group
    int reduce_op = 0;       // c10d::ReduceOp::RedOpType
    int64_t group_size = 0;  // all_gather / reduce_scatter: as traced
    int64_t root = 0;        // broadcast: the source's rank in the group
    std::vector<int64_t> out_splits, in_splits;  // all_to_all: rows per rank (empty: even)
    int32_t input = -1, output = -1;
  };

 private:
  std::vector<Step> steps_;
  std::vector<int> index_of_step_;  // program step -> index in steps_, -1 if not a collective
};

// The turns of one call of a program, held by its task.
class CollectiveTurns {
 public:
  struct Turn;
  CollectiveTurns(std::vector<std::shared_ptr<Turn>> turns, std::vector<int> index_of_step);
  ~CollectiveTurns();  // cancels the turns not reached

  // In the program's task: runs collective step `step` (hands it to its
  // turn and waits); throws its error (DistBackendError).
  void run(size_t step);
  // Cancels the turns not reached (their collectives run nothing), with why.
  void cancel(const std::string& why);

 private:
  std::vector<std::shared_ptr<Turn>> turns_;
  std::vector<int> index_of_step_;
};

}  // namespace torchneuron
