// torch.distributed's "neuron" backend: a c10d::Backend whose collectives
// run on the raw device buffers: neuroncoll (collectives/, shared memory)
// between the ranks of a host, gloo between hosts (Communicator.h).
//
// Ordering: each group owns one queue, a runtime stream of its own on the
// group's device. A collective is queued there behind an event of the
// caller's current stream (so it sees every value queued before it), and all
// collectives of the group run one after another in the order they were
// issued, whatever stream issued them, so ranks cannot disagree on the order.
// A collective whose caller waits at once (c10d's asyncOp false) runs on the
// caller's thread instead when nothing is pending there or on the queue
// (run_inline), in the same order. Work::wait() orders the caller's current stream after the collective
// without blocking the host (NeuronWork.h); get_future() completes with the
// outputs. Errors of neuroncoll (mismatch, timeout naming the missing ranks,
// a peer's error) are raised as DistBackendError; after a timeout
// the group is broken and later collectives fail at once. Errors found by
// then are raised by wait() itself, later ones at the next synchronization of
// the stream that waited.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "csrc/distributed/Communicator.h"
#include "csrc/distributed/NeuronWork.h"
#include "csrc/distributed/TensorStaging.h"
#include "neuroncoll/group.hpp"
#include "neuronrt/neuronrt.h"

namespace torchneuron {

class ProcessGroupNeuron final : public c10d::Backend {
 public:
  // Meets the other ranks through `store` (every rank of the group
  // constructs its backend); `timeout` bounds every wait of the group.
  // `topology` says which ranks share a host; on several hosts `groups` are
  // the gloo groups between them.
  ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout, const std::string& group_name,
                     HostTopology topology, InterHostGroups groups);
  ~ProcessGroupNeuron() override;

  const std::string getBackendName() const override { return "neuron"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Point to point: a task of the queue posts the message
  // (Communicator::post) and the queue goes on; the message moves on the
  // group's progress thread with the others posted, and its work completes
  // when it ended. So sends and receives issued one by one complete for any
  // sizes also when ranks send to each other first (a ring, a halo
  // exchange). A later collective's task first waits until every posted
  // message ended, keeping the issue order between ranks.
  //
  // c10d's coalescing (batch_isend_irecv, _coalescing_manager with a device):
  // sends and receives issued in between are posted by one task at
  // endCoalescing(), and its work completes when all of them ended. Other
  // collectives issued in between run in order as usual; the work of
  // endCoalescing() completes after all of them (the group's queue is ordered).
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // abort(): the collective running (if any) and every one queued or issued
  // later fail at once with "aborted" (a rank waiting for peers that will
  // not come is released); the group is unusable afterwards. shutdown()
  // (destroy_process_group) does the same to whatever is still pending, then
  // waits for the queue to drain; work that already ran is unaffected.
  void abort() override;
  void shutdown() override;

  // A collective of a compiled program (csrc/compiler/ProgramCollectives.h):
  // `body` is queued on the group's queue now, in issue order with the
  // group's other collectives, without an event of the caller's stream (the
  // body itself waits until the program's task reaches the step). `body`
  // must not throw. Refused, as every collective is, once the group was
  // aborted or destroyed, and for another device than the group's. Also
  // called from a stream's worker (the program's step, under
  // NEURON_LAUNCH_BLOCKING=1).
  void enqueue_program_step(const char* name, c10::DeviceIndex device,
                            std::function<void(Communicator&)> body);
  // Bounds every wait of the group.
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Which paths this rank's collectives took (tests, profiling).
  neuroncoll::GroupStats stats() const;
  // Collectives that ran on the caller's thread (enqueue()) or on a thread
  // waiting for them (take_turn()).
  uint64_t inline_runs() const { return inline_runs_.load(std::memory_order_relaxed); }
  const HostTopology& topology() const { return group_->topology(); }

 private:
  using Body = std::function<void(Communicator&)>;
  // Ends a queued operation with its error (null: success).
  using Finish = std::function<void(std::exception_ptr)>;
  // Runs on the queue and calls `finish` once, then or later from another
  // thread (point to point, which does not hold the queue).
  using AsyncBody = std::function<void(Communicator&, Finish)>;
  // Queues `body` on the group's queue behind the current stream of
  // `device`; the work completes with `outputs`. `async_op` is c10d's
  // option: false when the caller waits for the work at once. Then, if the
  // caller's stream and the group's queue have nothing pending, `body` runs
  // on the calling thread instead (run_inline), and the work is complete on
  // return.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name,
                                         c10::DeviceIndex device, std::vector<at::Tensor> outputs,
                                         bool async_op, Body body);
  // Queues `body` with a work made earlier (point to point, the coalesced
  // one); never inline.
  c10::intrusive_ptr<c10d::Work> enqueue_work(c10::intrusive_ptr<NeuronWork> work,
                                              const char* name, c10::DeviceIndex device,
                                              AsyncBody body);
  // What every collective does first: refuses an ended group, binds `work`
  // to `device` and releases retired works; returns the group's queue.
  nrtStream_t prepare(NeuronWork& work, const char* name, c10::DeviceIndex device);
  // Runs `body` on the calling thread and completes `work` if the caller's
  // current stream and the group's queue are idle and no other inline run
  // holds the group and no point-to-point message is in flight; false
  // (nothing done) otherwise.
  bool run_inline(c10::DeviceIndex device, NeuronWork& work, const Body& body);
  // Queues `body` behind the caller's current stream.
  void submit(nrtStream_t queue, c10::DeviceIndex device, const char* name,
              c10::intrusive_ptr<NeuronWork> work, AsyncBody body);
  // Makes `queue` wait for what the caller's current stream of `device` has
  // queued so far; false when that stream is idle (nothing to wait for).
  bool order_after_caller(nrtStream_t queue, c10::DeviceIndex device);
  // Launches `task` on the group's queue with the next ticket (stored in
  // *ticket before the launch when given); it runs under run_mu_.
  void launch_on_queue(nrtStream_t queue, const char* name, std::function<void()> task,
                       uint64_t* ticket = nullptr);
  // Ticket `ticket` has run.
  void ran(uint64_t ticket);
  // A queued collective (enqueue()) that a thread waiting for its work on
  // the host may run itself instead of the queue's thread.
  struct Turn {
    uint64_t ticket = 0;
    bool taken = false;  // guarded by run_mu_: it ran on a waiting thread
    Body body;
  };
  // On a thread that waits for `work` on the host for `timeout` (kNoTimeout:
  // no limit): runs the turn there if every collective issued before it has
  // run, the queue's thread has not started it (then its task does nothing)
  // and the wait may last the group's timeout; else nothing.
  void take_turn(Turn& turn, NeuronWork& work, std::chrono::milliseconds timeout);
  // A send or receive recorded while coalescing: the coalesced work.
  c10::intrusive_ptr<c10d::Work> record_p2p(bool is_send, const at::Tensor& t, int peer, int tag,
                                            neuroncoll::DType dt);
  nrtStream_t queue_for(c10::DeviceIndex device, const char* name);
  // The one tensor of a collective's tensor list (one device per rank).
  static const at::Tensor& single(const std::vector<at::Tensor>& ts, const char* name);
  void check_rank(int64_t rank, const char* name, const char* what) const;

  // Called by a task when it has run: its reference to the work (which holds
  // the caller's tensors) is dropped on a caller's thread, at the next
  // enqueue or when the group is destroyed, never on the worker.
  void retire(c10::intrusive_ptr<c10d::Work> work);

  std::unique_ptr<Communicator> group_;
  std::chrono::milliseconds timeout_;
  std::atomic<int> ended_{0};  // kAborted or kShutDown once abort()/shutdown() ran
  static constexpr int kAborted = 1, kShutDown = 2;
  mutable std::mutex mu_;
  nrtStream_t queue_ = nullptr;
  c10::DeviceIndex device_ = -1;
  std::vector<c10::intrusive_ptr<c10d::Work>> retired_;  // guarded by mu_
  // Issue order of the group's collectives. Each is issued under issue_mu_,
  // either as a task for queue_ with the next ticket or, when every ticket
  // issued has run, as an inline run on the caller's thread, which takes
  // run_mu_ before issue_mu_ is released. Every task runs under run_mu_, so a
  // task issued after an inline run waits for it, and an inline run never
  // starts while a task issued before it is queued or running, nor while
  // another inline run is. A waiting thread may run a task's collective in
  // its place (take_turn) under the same rules: only when every earlier
  // ticket has run, holding run_mu_.
  std::mutex issue_mu_;
  std::mutex run_mu_;
  uint64_t issued_ = 0;                  // tickets issued; guarded by issue_mu_
  std::atomic<uint64_t> ran_through_{0};  // tickets up to this one have run
  std::atomic<uint64_t> inline_runs_{0};

  // Between startCoalescing() and endCoalescing() (the caller's thread only).
  struct P2P {
    bool is_send;
    StagedTensor tensor;
    int peer, tag;
    neuroncoll::DType dtype;
  };
  // Posts `ops` (Communicator::post); the work ends when the last one did,
  // with the first error, receives copied back to their tensors first.
  static AsyncBody post_p2p(std::vector<P2P> ops);
  bool coalescing_ = false;
  std::vector<P2P> coalesced_p2p_;
  c10::DeviceIndex coalesced_device_ = -1;
  c10::intrusive_ptr<NeuronWork> coalesced_work_;
};

}  // namespace torchneuron
