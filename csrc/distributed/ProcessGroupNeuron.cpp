// Construction, the group's queue, and the operations that are not
// reductions or data movement: barrier, point to point and coalesced batches
// of it. The collectives are in ProcessGroupNeuronCollectives.cpp.
#include "csrc/distributed/ProcessGroupNeuron.h"

#include <c10/util/Exception.h>

#include "csrc/distributed/CollectiveTypes.h"
#include "csrc/distributed/NeuronWork.h"
#include "csrc/distributed/TensorStaging.h"
#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronStream.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {
namespace {

// Runs a collective's body; its error, if any.
std::exception_ptr run_body(const std::function<void(Communicator&)>& body, Communicator& g) {
  try {
    body(g);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

ProcessGroupNeuron::ProcessGroupNeuron(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout,
                                       const std::string& group_name, HostTopology topology,
                                       InterHostGroups groups)
    : c10d::Backend(rank, size), timeout_(timeout) {
  TORCH_CHECK(topology.rank == rank && static_cast<int>(topology.host_of.size()) == size,
              "ProcessGroupNeuron: the topology is not this group's");
  group_ = std::make_unique<Communicator>(
      store, std::move(topology), timeout,
      "pg" + (group_name.empty() ? std::string("0") : group_name), std::move(groups));
}

ProcessGroupNeuron::~ProcessGroupNeuron() {
  // The queued collectives use the group: let them finish first (without the
  // GIL, which a future's Python callback on the queue may need).
  if (queue_ != nullptr) blocking_wait([this] { nrtStreamDestroy(queue_); });
  blocking_wait([this] { group_->drain(); });  // posted messages, whose works retire here
  retired_.clear();
}

void ProcessGroupNeuron::abort() {
  int expected = 0;
  ended_.compare_exchange_strong(expected, kAborted);
  group_->abort();
}

void ProcessGroupNeuron::shutdown() {
  nrtStream_t queue = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue = queue_;
  }
  // destroy_process_group() first lets the collectives this rank issued run,
  // as NCCL's shutdown flushes its communicators: wait() does not block the
  // host, so a script's last collectives (e.g. gathering a state dict for
  // rank 0) may still be queued when it ends the group, and its peers wait
  // for them. Each is bounded by the group's timeout. The GIL is released: a
  // future's callback on the queue may need it. abort() ends them at once.
  // Sends and receives the queue posted end on the progress thread.
  Communicator* group = group_.get();
  if (queue != nullptr) blocking_wait([this, queue, group] {
    nrtStreamSynchronize(queue);
    std::lock_guard<std::mutex> run(run_mu_);  // an inline run of another thread
    group->drain();
  });
  int expected = 0;
  ended_.compare_exchange_strong(expected, kShutDown);
  group_->abort();
  // Anything queued meanwhile fails at once now; wait for those tasks too.
  if (queue != nullptr) blocking_wait([queue, group] {
    nrtStreamSynchronize(queue);
    group->drain();
  });
}

void ProcessGroupNeuron::retire(c10::intrusive_ptr<c10d::Work> work) {
  std::lock_guard<std::mutex> lock(mu_);
  retired_.push_back(std::move(work));
}

neuroncoll::GroupStats ProcessGroupNeuron::stats() const { return group_->stats(); }

nrtStream_t ProcessGroupNeuron::queue_for(c10::DeviceIndex device, const char* name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_ == nullptr) {
    check_device_index(device, name);
    NEURON_CHECK(nrtStreamCreate(&queue_, device, 0));
    device_ = device;
  }
  TORCH_CHECK(device == device_, "ProcessGroupNeuron ", name, ": this group runs on neuron:",
              static_cast<int>(device_), " (its first collective's device), got tensors on neuron:",
              static_cast<int>(device), "; use one device per rank and group");
  return queue_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue(c10d::OpType type, const char* name,
                                                           c10::DeviceIndex device,
                                                           std::vector<at::Tensor> outputs,
                                                           bool async_op, Body body) {
  auto work = c10::make_intrusive<NeuronWork>(rank_, type, name, std::move(outputs));
  nrtStream_t queue = prepare(*work, name, device);
  if (!async_op && run_inline(device, *work, body)) return work;
  auto turn = std::make_shared<Turn>();
  turn->body = std::move(body);
  // A thread that waits for the work on the host may run it itself, when
  // it has no event of the caller's stream to wait for.
  if (!order_after_caller(queue, device) && dist_inline()) {
    work->set_run_here([this, turn, w = work.get()](std::chrono::milliseconds timeout) {
      take_turn(*turn, *w, timeout);
    });
  }
  Communicator* group = group_.get();
  launch_on_queue(
      queue, name,
      [this, work, group, turn]() mutable {
        if (!turn->taken) work->complete(run_body(turn->body, *group));
        turn->body = nullptr;  // its buffers go now, not with the work
        retire(std::move(work));
      },
      &turn->ticket);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue_work(c10::intrusive_ptr<NeuronWork> work,
                                                                const char* name,
                                                                c10::DeviceIndex device,
                                                                AsyncBody body) {
  nrtStream_t queue = prepare(*work, name, device);
  submit(queue, device, name, work, std::move(body));
  return work;
}

nrtStream_t ProcessGroupNeuron::prepare(NeuronWork& work, const char* name,
                                        c10::DeviceIndex device) {
  if (const int ended = ended_.load()) {
    C10_THROW_ERROR(DistBackendError,
                    std::string("[neuron] ") + name + ": the process group was " +
                        (ended == kAborted ? "aborted" : "destroyed (destroy_process_group)") +
                        " on rank " + std::to_string(rank_));
  }
  nrtStream_t queue = queue_for(device, name);
  work.bind(device);
  std::vector<c10::intrusive_ptr<c10d::Work>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished.swap(retired_);  // released here, on the caller's thread
  }
  return queue;
}

bool ProcessGroupNeuron::run_inline(c10::DeviceIndex device, NeuronWork& work, const Body& body) {
  // Not from a stream's worker (a future's callback on the queue), nor while
  // messages move (a callback on the thread that ended one would wait for
  // itself in the collective's drain()).
  if (!dist_inline() || neuronrt::on_worker_thread() || group_->messages_in_flight()) return false;
  // Everything the caller's stream queued has run: the collective sees it.
  if (nrtStreamQuery(current_stream_handle(device)) != nrtSuccess) return false;
  std::unique_lock<std::mutex> run(run_mu_, std::defer_lock);
  {
    std::lock_guard<std::mutex> issue(issue_mu_);
    // Every collective issued before this one has run (no task queued, no
    // inline run holding the group); those issued later wait for run_mu_.
    if (ran_through_.load() != issued_ || !run.try_lock()) return false;
  }
  inline_runs_.fetch_add(1, std::memory_order_relaxed);
  std::exception_ptr error;
  // The collective waits for its peers without the GIL.
  blocking_wait([&] { error = run_body(body, *group_); });
  run.unlock();  // before the future's callbacks, which may issue collectives
  work.complete(error);
  return true;
}

void ProcessGroupNeuron::take_turn(Turn& turn, NeuronWork& work,
                                   std::chrono::milliseconds timeout) {
  // A shorter wait must be able to give up while the collective goes on.
  if (neuronrt::on_worker_thread() || (timeout != kNoTimeout && timeout < timeout_)) return;
  std::unique_lock<std::mutex> run(run_mu_, std::defer_lock);
  {
    std::lock_guard<std::mutex> issue(issue_mu_);
    if (ran_through_.load() + 1 != turn.ticket || !run.try_lock()) return;
  }
  if (turn.taken) return;
  turn.taken = true;
  inline_runs_.fetch_add(1, std::memory_order_relaxed);
  std::exception_ptr error = run_body(turn.body, *group_);
  turn.body = nullptr;
  ran(turn.ticket);
  run.unlock();
  work.complete(error);
}

bool ProcessGroupNeuron::order_after_caller(nrtStream_t queue, c10::DeviceIndex device) {
  // The collective waits for what the caller's stream has queued so far
  // (nothing to wait for when that stream is idle: small collectives skip
  // the event).
  nrtStream_t caller = current_stream_handle(device);
  if (nrtStreamQuery(caller) == nrtSuccess) return false;
  nrtEvent_t ready = nullptr;
  NEURON_CHECK(nrtEventCreate(&ready, nrtEventDisableTiming));
  nrtStatus s = nrtEventRecord(ready, caller);
  if (s == nrtSuccess) s = nrtStreamWaitEvent(queue, ready);
  nrtEventDestroy(ready);  // reference counted: the wait keeps its capture
  NEURON_CHECK(s);
  return true;
}

void ProcessGroupNeuron::submit(nrtStream_t queue, c10::DeviceIndex device, const char* name,
                                c10::intrusive_ptr<NeuronWork> work, AsyncBody body) {
  order_after_caller(queue, device);
  Communicator* group = group_.get();
  // The task never fails on the stream: the collective's error belongs to
  // its work (raised by wait()), and later collectives must still run.
  launch_on_queue(queue, name, [this, work, group, body = std::move(body)]() mutable {
    body(*group, [this, work = std::move(work)](std::exception_ptr error) mutable {
      work->complete(error);
      retire(std::move(work));
    });
  });
}

void ProcessGroupNeuron::launch_on_queue(nrtStream_t queue, const char* name,
                                         std::function<void()> task, uint64_t* ticket_out) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> issue(issue_mu_);
    ticket = ++issued_;
    if (ticket_out) *ticket_out = ticket;
  }
  NEURON_TRY {
    try {
      neuronrt::launch(queue, name, [this, ticket, task = std::move(task)]() {
        std::lock_guard<std::mutex> run(run_mu_);
        task();
        ran(ticket);
      });
    } catch (...) {
      std::lock_guard<std::mutex> issue(issue_mu_);
      if (issued_ == ticket) --issued_;  // else later tickets never count as run: no inline runs
      throw;
    }
  }
  NEURON_CATCH
}

void ProcessGroupNeuron::ran(uint64_t ticket) {
  uint64_t seen = ran_through_.load();
  while (seen < ticket && !ran_through_.compare_exchange_weak(seen, ticket)) {
  }
}

void ProcessGroupNeuron::enqueue_program_step(const char* name, c10::DeviceIndex device,
                                              std::function<void(Communicator&)> body) {
  if (const int ended = ended_.load()) {
    C10_THROW_ERROR(DistBackendError,
                    std::string("[neuron] ") + name + " in a compiled program: the process group was " +
                        (ended == kAborted ? "aborted" : "destroyed (destroy_process_group)") +
                        " on rank " + std::to_string(rank_));
  }
  nrtStream_t queue = queue_for(device, name);
  if (!neuronrt::on_worker_thread()) {  // finished work is released on a caller's thread only
    std::vector<c10::intrusive_ptr<c10d::Work>> finished;
    std::lock_guard<std::mutex> lock(mu_);
    finished.swap(retired_);
  }
  Communicator* group = group_.get();
  launch_on_queue(queue, name, [group, body = std::move(body)]() { body(*group); });
}

const at::Tensor& ProcessGroupNeuron::single(const std::vector<at::Tensor>& ts, const char* name) {
  TORCH_CHECK(ts.size() == 1, "ProcessGroupNeuron ", name,
              ": expected one tensor per rank, got ", ts.size());
  check_neuron_tensor(ts[0], name);
  return ts[0];
}

void ProcessGroupNeuron::check_rank(int64_t rank, const char* name, const char* what) const {
  TORCH_CHECK(rank >= 0 && rank < size_, "ProcessGroupNeuron ", name, ": ", what, " ", rank,
              " is not a rank of this group of ", size_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::barrier(const c10d::BarrierOptions& opts) {
  // A barrier follows the group's device once it has one; before that it
  // takes the device c10d names (device_id, device_ids), else the current one.
  c10::DeviceIndex device = current_device();
  if (opts.device.has_value() && opts.device->is_privateuseone() && opts.device->has_index()) {
    device = opts.device->index();
  } else if (!opts.device_ids.empty()) {
    device = static_cast<c10::DeviceIndex>(opts.device_ids.front());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_ >= 0) device = device_;
  }
  return enqueue(c10d::OpType::BARRIER, "barrier", device, {}, opts.asyncOp,
                 [](Communicator& g) { check_status(g.barrier()); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  const at::Tensor& t = single(tensors, "send");
  check_rank(dst_rank, "send", "destination");
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "send");
  if (coalescing_) return record_p2p(true, t, dst_rank, tag, dt);
  return enqueue_work(c10::make_intrusive<NeuronWork>(rank_, c10d::OpType::SEND, "send",
                                                    std::vector<at::Tensor>{t}),
                      "send", t.device().index(),
                      post_p2p({{true, stage(t, true), dst_rank, tag, dt}}));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  const at::Tensor& t = single(tensors, "recv");
  check_rank(src_rank, "recv", "source");
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "recv");
  if (coalescing_) return record_p2p(false, t, src_rank, tag, dt);
  return enqueue_work(c10::make_intrusive<NeuronWork>(rank_, c10d::OpType::RECV, "recv",
                                                    std::vector<at::Tensor>{t}),
                      "recv", t.device().index(),
                      post_p2p({{false, stage(t, false), src_rank, tag, dt}}));
}

void ProcessGroupNeuron::startCoalescing() {
  TORCH_CHECK(!coalescing_, "ProcessGroupNeuron: startCoalescing while already coalescing");
  coalescing_ = true;
  coalesced_p2p_.clear();
  coalesced_device_ = -1;
  coalesced_work_ = c10::make_intrusive<NeuronWork>(rank_, c10d::OpType::COALESCED, "coalesced",
                                                    std::vector<at::Tensor>());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::record_p2p(bool is_send, const at::Tensor& t,
                                                              int peer, int tag,
                                                              neuroncoll::DType dt) {
  TORCH_CHECK(coalesced_device_ < 0 || coalesced_device_ == t.device().index(),
              "ProcessGroupNeuron: a coalesced batch must use one device");
  coalesced_device_ = t.device().index();
  coalesced_p2p_.push_back({is_send, stage(t, is_send), peer, tag, dt});
  return coalesced_work_;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::endCoalescing() {
  TORCH_CHECK(coalescing_, "ProcessGroupNeuron: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<P2P> ops = std::move(coalesced_p2p_);
  coalesced_p2p_.clear();
  c10::intrusive_ptr<NeuronWork> work = std::move(coalesced_work_);
  c10::DeviceIndex device = coalesced_device_;
  if (device < 0) {
    std::lock_guard<std::mutex> lock(mu_);
    device = device_ >= 0 ? device_ : current_device();
  }
  return enqueue_work(std::move(work), "coalesced", device, post_p2p(std::move(ops)));
}

ProcessGroupNeuron::AsyncBody ProcessGroupNeuron::post_p2p(std::vector<P2P> ops) {
  return [ops = std::move(ops)](Communicator& c, Finish finish) {
    struct Batch {
      std::mutex mu;
      size_t left;
      neuroncoll::Status first;
      std::vector<P2P> ops;
      Finish finish;
    };
    auto batch = std::make_shared<Batch>();
    batch->left = ops.size();
    batch->ops = ops;
    batch->finish = std::move(finish);
    if (ops.empty()) return batch->finish(nullptr);
    for (const P2P& op : ops) {
      c.post({op.is_send, op.tensor.data(), op.tensor.count(), op.dtype, op.peer, op.tag},
             [batch](neuroncoll::Status s) {
               {
                 std::lock_guard<std::mutex> lock(batch->mu);
                 if (batch->first.ok() && !s.ok()) batch->first = std::move(s);
                 if (--batch->left > 0) return;
               }
               std::exception_ptr error;
               try {
                 check_status(batch->first);
                 for (const P2P& op : batch->ops) {
                   if (!op.is_send) op.tensor.copy_back();
                 }
               } catch (...) {
                 error = std::current_exception();
               }
               batch->finish(error);
             });
    }
  };
}

}  // namespace torchneuron
