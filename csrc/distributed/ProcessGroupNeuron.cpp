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
  if (queue != nullptr) blocking_wait([queue] { nrtStreamSynchronize(queue); });
  int expected = 0;
  ended_.compare_exchange_strong(expected, kShutDown);
  group_->abort();
  // Anything queued meanwhile fails at once now; wait for those tasks too.
  if (queue != nullptr) blocking_wait([queue] { nrtStreamSynchronize(queue); });
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
                                                           Body body) {
  return enqueue_work(c10::make_intrusive<NeuronWork>(rank_, type, name, std::move(outputs)), name,
                      device, std::move(body));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::enqueue_work(c10::intrusive_ptr<NeuronWork> work,
                                                                const char* name,
                                                                c10::DeviceIndex device, Body body) {
  if (const int ended = ended_.load()) {
    C10_THROW_ERROR(DistBackendError,
                    std::string("[neuron] ") + name + ": the process group was " +
                        (ended == kAborted ? "aborted" : "destroyed (destroy_process_group)") +
                        " on rank " + std::to_string(rank_));
  }
  nrtStream_t queue = queue_for(device, name);
  work->bind(device);
  std::vector<c10::intrusive_ptr<c10d::Work>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished.swap(retired_);  // released here, on the caller's thread
  }
  // The collective waits for what the caller's stream has queued so far
  // (nothing to wait for when that stream is idle: small collectives skip
  // the event).
  nrtStream_t caller = current_stream_handle(device);
  if (nrtStreamQuery(caller) != nrtSuccess) {
    nrtEvent_t ready = nullptr;
    NEURON_CHECK(nrtEventCreate(&ready, nrtEventDisableTiming));
    nrtStatus s = nrtEventRecord(ready, caller);
    if (s == nrtSuccess) s = nrtStreamWaitEvent(queue, ready);
    nrtEventDestroy(ready);  // reference counted: the wait keeps its capture
    NEURON_CHECK(s);
  }
  Communicator* group = group_.get();
  // The task never fails on the stream: the collective's error belongs to
  // its work (raised by wait()), and later collectives must still run.
  NEURON_TRY {
    neuronrt::launch(queue, name, [this, work, group, body = std::move(body)]() mutable {
      std::exception_ptr error;
      try {
        body(*group);
      } catch (...) {
        error = std::current_exception();
      }
      work->complete(error);
      retire(std::move(work));
    });
  }
  NEURON_CATCH
  return work;
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
  NEURON_TRY {
    neuronrt::launch(queue, name, [group, body = std::move(body)]() { body(*group); });
  }
  NEURON_CATCH
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
  return enqueue(c10d::OpType::BARRIER, "barrier", device, {},
                 [](Communicator& g) { check_status(g.barrier()); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  const at::Tensor& t = single(tensors, "send");
  check_rank(dst_rank, "send", "destination");
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "send");
  if (coalescing_) return record_p2p(true, t, dst_rank, tag, dt);
  StagedTensor in = stage(t, true);
  return enqueue(c10d::OpType::SEND, "send", t.device().index(), {t},
                 [in, dt, dst_rank, tag](Communicator& g) {
                   check_status(g.send(in.data(), in.count(), dt, dst_rank, tag));
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  const at::Tensor& t = single(tensors, "recv");
  check_rank(src_rank, "recv", "source");
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "recv");
  if (coalescing_) return record_p2p(false, t, src_rank, tag, dt);
  StagedTensor out = stage(t, false);
  return enqueue(c10d::OpType::RECV, "recv", t.device().index(), {t},
                 [out, dt, src_rank, tag](Communicator& g) {
                   check_status(g.recv(out.data(), out.count(), dt, src_rank, tag));
                   out.copy_back();
                 });
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
  return enqueue_work(std::move(work), "coalesced", device,
                      [ops](Communicator& c) { run_p2p_batch(c, ops); });
}

void ProcessGroupNeuron::run_p2p_batch(Communicator& c, const std::vector<P2P>& ops) {
  std::vector<Communicator::P2P> raw;
  for (const P2P& op : ops) {
    raw.push_back({op.is_send, op.tensor.data(), op.tensor.count(), op.dtype, op.peer, op.tag});
  }
  check_status(c.p2p_batch(raw));
  for (const P2P& op : ops) {
    if (!op.is_send) op.tensor.copy_back();
  }
}

}  // namespace torchneuron
