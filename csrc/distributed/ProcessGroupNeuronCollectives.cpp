// The reductions and data movements of ProcessGroupNeuron. Each one checks
// its arguments on the caller's thread (a clear error before anything is
// queued), stages the tensors (csrc/distributed/TensorStaging.h) and queues
// one task that calls neuroncoll; coalesced variants run their collectives
// one after another in one task.
#include <c10/util/Exception.h>

#include "csrc/distributed/CollectiveTypes.h"
#include "csrc/distributed/ProcessGroupNeuron.h"
#include "csrc/distributed/TensorStaging.h"

namespace torchneuron {
namespace {

using Group = Communicator;

// One all_reduce: checks, staging and the call.
struct AllReduceStep {
  StagedTensor t;
  neuroncoll::DType dt;
  neuroncoll::ReduceOp op;
  PremulFactor factor;
  void run(Group& g) const {
    check_status(g.all_reduce(t.data(), t.data(), t.count(), dt, op, factor.value()));
    t.copy_back();
  }
};

AllReduceStep all_reduce_step(const at::Tensor& t, const c10d::ReduceOp& op, const char* name) {
  check_neuron_tensor(t, name);
  return {stage(t, true), coll_dtype(t.scalar_type(), name), coll_reduce_op(op, name),
          PremulFactor(op)};
}

struct AllGatherStep {
  at::Tensor in;
  StagedTensor out;
  neuroncoll::DType dt;
  void run(Group& g) const {
    check_status(g.all_gather(in.data_ptr(), out.data(), static_cast<size_t>(in.numel()), dt));
    out.copy_back();
  }
};

AllGatherStep all_gather_step(const at::Tensor& output, const at::Tensor& input, int size,
                              const char* name) {
  check_neuron_tensor(output, name);
  check_neuron_tensor(input, name);
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  output.numel() == input.numel() * size,
              "ProcessGroupNeuron ", name, ": the output must hold group size (", size,
              ") x the input's ", input.numel(), " elements of ", input.scalar_type(), ", got ",
              output.numel(), " of ", output.scalar_type());
  return {contiguous_input(input), stage(output, false), coll_dtype(input.scalar_type(), name)};
}

struct ReduceScatterStep {
  at::Tensor in;
  StagedTensor out;
  neuroncoll::DType dt;
  neuroncoll::ReduceOp op;
  PremulFactor factor;
  void run(Group& g) const {
    check_status(g.reduce_scatter(in.data_ptr(), out.data(), out.count(), dt, op, factor.value()));
    out.copy_back();
  }
};

ReduceScatterStep reduce_scatter_step(const at::Tensor& output, const at::Tensor& input,
                                      const c10d::ReduceOp& op, int size, const char* name) {
  check_neuron_tensor(output, name);
  check_neuron_tensor(input, name);
  TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                  input.numel() == output.numel() * size,
              "ProcessGroupNeuron ", name, ": the input must hold group size (", size,
              ") x the output's ", output.numel(), " elements of ", output.scalar_type(),
              ", got ", input.numel(), " of ", input.scalar_type());
  return {contiguous_input(input), stage(output, false), coll_dtype(input.scalar_type(), name),
          coll_reduce_op(op, name), PremulFactor(op)};
}

// Element counts of an all_to_all from split sizes along dim 0 (empty:
// equal splits).
std::vector<size_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits,
                                 int size, const char* name, const char* what) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t row_elems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<size_t> counts(size);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "ProcessGroupNeuron ", name, ": the ", what, "'s ", rows,
                " rows do not split evenly over ", size, " ranks; pass split sizes");
    for (auto& c : counts) c = static_cast<size_t>(rows / size * row_elems);
    return counts;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "ProcessGroupNeuron ", name, ": ", what,
              " split sizes ", c10::IntArrayRef(splits), " must have one entry per rank (", size,
              ")");
  int64_t total = 0;
  for (int i = 0; i < size; ++i) {
    TORCH_CHECK(splits[i] >= 0, "ProcessGroupNeuron ", name, ": negative ", what, " split size ",
                splits[i]);
    counts[i] = static_cast<size_t>(splits[i] * row_elems);
    total += splits[i];
  }
  TORCH_CHECK(total == rows, "ProcessGroupNeuron ", name, ": ", what, " split sizes ",
              c10::IntArrayRef(splits), " add up to ", total, " rows, the tensor has ", rows);
  return counts;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "all_reduce");
  AllReduceStep step = all_reduce_step(t, opts.reduceOp, "all_reduce");
  return enqueue(c10d::OpType::ALLREDUCE, "all_reduce", t.device().index(), {t},
                 opts.asyncOp, [step](Group& g) { step.run(g); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "ProcessGroupNeuron all_reduce_coalesced: no tensors");
  std::vector<AllReduceStep> steps;
  for (const at::Tensor& t : tensors) {
    steps.push_back(all_reduce_step(t, opts.reduceOp, "all_reduce_coalesced"));
  }
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced",
                 tensors[0].device().index(), tensors, opts.asyncOp, [steps](Group& g) {
                   for (const AllReduceStep& s : steps) s.run(g);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast");
  check_rank(opts.rootRank, "broadcast", "root");
  const int root = static_cast<int>(opts.rootRank);
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "broadcast");
  StagedTensor buf = stage(t, rank_ == root);
  return enqueue(c10d::OpType::BROADCAST, "broadcast", t.device().index(), {t},
                 opts.asyncOp, [buf, dt, root](Group& g) {
                   check_status(g.broadcast(buf.data(), buf.count(), dt, root));
                   buf.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce");
  check_rank(opts.rootRank, "reduce", "root");
  const int root = static_cast<int>(opts.rootRank);
  AllReduceStep s = all_reduce_step(t, opts.reduceOp, "reduce");
  return enqueue(c10d::OpType::REDUCE, "reduce", t.device().index(), {t},
                 opts.asyncOp, [s, root](Group& g) {
                   check_status(g.reduce(s.t.data(), s.t.data(), s.t.count(), s.dt, s.op, root,
                                         s.factor.value()));
                   if (g.rank() == root) s.t.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  AllGatherStep s = all_gather_step(output, input, size_, "all_gather_into_tensor");
  return enqueue(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor",
                 input.device().index(), {output}, opts.asyncOp, [s](Group& g) { s.run(g); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* name = "all_gather_into_tensor_coalesced";
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "ProcessGroupNeuron ", name,
              ": expected as many outputs as inputs (at least one), got ", outputs.size(), " and ",
              inputs.size());
  std::vector<AllGatherStep> steps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    steps.push_back(all_gather_step(outputs[i], inputs[i], size_, name));
  }
  return enqueue(c10d::OpType::COALESCED, name, inputs[0].device().index(), outputs,
                 opts.asyncOp, [steps](Group& g) {
                   for (const AllGatherStep& s : steps) s.run(g);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = single(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "ProcessGroupNeuron all_gather: expected one output list of ", size_,
              " tensors (the group size)");
  check_same_shape(outputs[0], in, "all_gather", "output");
  at::Tensor src = contiguous_input(in);
  at::Tensor flat = task_alias(flat_buffer(in, in.numel() * size_));
  const neuroncoll::DType dt = coll_dtype(in.scalar_type(), "all_gather");
  std::vector<at::Tensor> outs = task_aliases(outputs[0]);
  return enqueue(c10d::OpType::ALLGATHER, "all_gather", in.device().index(), outputs[0],
                 opts.asyncOp, [src, flat, dt, outs](Group& g) {
                   check_status(g.all_gather(src.data_ptr(), flat.data_ptr(),
                                             static_cast<size_t>(src.numel()), dt));
                   unpack(flat, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* name = "all_gather_coalesced";
  TORCH_CHECK(!inputs.empty() && output_lists.size() == static_cast<size_t>(size_),
              "ProcessGroupNeuron ", name, ": expected one output list per rank (", size_,
              ") and at least one input");
  // Output list r holds rank r's inputs: each input is all-gathered into a
  // flat buffer and block r goes to output_lists[r][i].
  std::vector<at::Tensor> srcs, flats, all_outputs;
  std::vector<std::vector<at::Tensor>> per_input(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_neuron_tensor(inputs[i], name);
    for (int r = 0; r < size_; ++r) {
      TORCH_CHECK(output_lists[r].size() == inputs.size(), "ProcessGroupNeuron ", name,
                  ": output list ", r, " has ", output_lists[r].size(), " tensors, expected ",
                  inputs.size());
      per_input[i].push_back(output_lists[r][i]);
      all_outputs.push_back(output_lists[r][i]);
    }
    check_same_shape(per_input[i], inputs[i], name, "output");
    per_input[i] = task_aliases(per_input[i]);
    coll_dtype(inputs[i].scalar_type(), name);
    srcs.push_back(contiguous_input(inputs[i]));
    flats.push_back(task_alias(flat_buffer(inputs[i], inputs[i].numel() * size_)));
  }
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, name, inputs[0].device().index(),
                 all_outputs, opts.asyncOp, [srcs, flats, per_input, name](Group& g) {
                   for (size_t i = 0; i < srcs.size(); ++i) {
                     check_status(g.all_gather(srcs[i].data_ptr(), flats[i].data_ptr(),
                                               static_cast<size_t>(srcs[i].numel()),
                                               coll_dtype(srcs[i].scalar_type(), name)));
                     unpack(flats[i], per_input[i]);
                   }
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather");
  check_rank(opts.rootRank, "gather", "root");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "ProcessGroupNeuron gather: the root needs one output list of ", size_,
                " tensors (the group size)");
    check_same_shape(outputs[0], in, "gather", "output");
    outs = task_aliases(outputs[0]);
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "ProcessGroupNeuron gather: only the root (rank ", root, ") takes outputs");
  }
  at::Tensor src = contiguous_input(in);
  at::Tensor flat = rank_ == root ? task_alias(flat_buffer(in, in.numel() * size_)) : at::Tensor();
  const neuroncoll::DType dt = coll_dtype(in.scalar_type(), "gather");
  std::vector<at::Tensor> user_outs = rank_ == root ? outputs[0] : std::vector<at::Tensor>();
  return enqueue(c10d::OpType::GATHER, "gather", in.device().index(), user_outs,
                 opts.asyncOp, [src, flat, dt, root, outs](Group& g) {
                   check_status(g.gather(src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                                         static_cast<size_t>(src.numel()), dt, root));
                   if (flat.defined()) unpack(flat, outs);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter");
  check_rank(opts.rootRank, "scatter", "root");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> ins;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "ProcessGroupNeuron scatter: the root needs one input list of ", size_,
                " tensors (the group size)");
    check_same_shape(inputs[0], out, "scatter", "input");
    ins = task_aliases(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                "ProcessGroupNeuron scatter: only the root (rank ", root, ") takes inputs");
  }
  StagedTensor dst = stage(out, false);
  at::Tensor flat = rank_ == root ? task_alias(flat_buffer(out, out.numel() * size_)) : at::Tensor();
  const neuroncoll::DType dt = coll_dtype(out.scalar_type(), "scatter");
  return enqueue(c10d::OpType::SCATTER, "scatter", out.device().index(), {out},
                 opts.asyncOp, [dst, flat, ins, dt, root](Group& g) {
                   if (flat.defined()) pack(ins, flat);
                   check_status(g.scatter(flat.defined() ? flat.data_ptr() : nullptr, dst.data(),
                                          dst.count(), dt, root));
                   dst.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  ReduceScatterStep s =
      reduce_scatter_step(output, input, opts.reduceOp, size_, "reduce_scatter_tensor");
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor",
                 input.device().index(), {output}, opts.asyncOp, [s](Group& g) { s.run(g); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* name = "reduce_scatter_tensor_coalesced";
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "ProcessGroupNeuron ", name,
              ": expected as many outputs as inputs (at least one), got ", outputs.size(), " and ",
              inputs.size());
  std::vector<ReduceScatterStep> steps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    steps.push_back(reduce_scatter_step(outputs[i], inputs[i], opts.reduceOp, size_, name));
  }
  return enqueue(c10d::OpType::COALESCED, name, inputs[0].device().index(), outputs,
                 opts.asyncOp, [steps](Group& g) {
                   for (const ReduceScatterStep& s : steps) s.run(g);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "ProcessGroupNeuron reduce_scatter: expected one input list of ", size_,
              " tensors (the group size)");
  check_same_shape(inputs[0], out, "reduce_scatter", "input");
  std::vector<at::Tensor> ins = task_aliases(inputs[0]);
  at::Tensor flat = flat_buffer(out, out.numel() * size_);
  ReduceScatterStep s = reduce_scatter_step(out, flat, opts.reduceOp, size_, "reduce_scatter");
  return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", out.device().index(), {out},
                 opts.asyncOp, [s, ins](Group& g) {
                   pack(ins, s.in);
                   s.run(g);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  const char* name = "all_to_all_single";
  check_neuron_tensor(output, name);
  check_neuron_tensor(input, name);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "ProcessGroupNeuron ", name,
              ": input is ", input.scalar_type(), ", output ", output.scalar_type());
  std::vector<size_t> send = split_counts(input, input_split_sizes, size_, name, "input");
  std::vector<size_t> recv = split_counts(output, output_split_sizes, size_, name, "output");
  const neuroncoll::DType dt = coll_dtype(input.scalar_type(), name);
  at::Tensor src = contiguous_input(input);
  StagedTensor dst = stage(output, false);
  return enqueue(c10d::OpType::ALLTOALL_BASE, name, input.device().index(), {output},
                 opts.asyncOp, [src, dst, send, recv, dt](Group& g) {
                   check_status(g.all_to_all(src.data_ptr(), send, dst.data(), recv, dt));
                   dst.copy_back();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& opts) {
  const char* name = "all_to_all";
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ &&
                  static_cast<int>(outputs.size()) == size_,
              "ProcessGroupNeuron ", name, ": expected ", size_, " inputs and outputs, got ",
              inputs.size(), " and ", outputs.size());
  std::vector<size_t> send, recv;
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < size_; ++r) {
    check_neuron_tensor(inputs[r], name);
    check_neuron_tensor(outputs[r], name);
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                    outputs[r].scalar_type() == inputs[0].scalar_type(),
                "ProcessGroupNeuron ", name, ": every tensor must have dtype ",
                inputs[0].scalar_type());
    send.push_back(static_cast<size_t>(inputs[r].numel()));
    recv.push_back(static_cast<size_t>(outputs[r].numel()));
    send_total += inputs[r].numel();
    recv_total += outputs[r].numel();
  }
  const neuroncoll::DType dt = coll_dtype(inputs[0].scalar_type(), name);
  at::Tensor src = task_alias(flat_buffer(inputs[0], send_total));
  at::Tensor dst = task_alias(flat_buffer(inputs[0], recv_total));
  std::vector<at::Tensor> ins = task_aliases(inputs), outs = task_aliases(outputs);
  return enqueue(c10d::OpType::ALLTOALL, name, inputs[0].device().index(), outputs,
                 opts.asyncOp, [src, dst, ins, outs, send, recv, dt](Group& g) {
                   pack(ins, src);
                   check_status(g.all_to_all(src.data_ptr(), send, dst.data_ptr(), recv, dt));
                   unpack(dst, outs);
                 });
}

}  // namespace torchneuron
