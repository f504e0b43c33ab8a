// Construction, the group's queue, and the operations that are not
// reductions or data movement: barrier and point to point. The collectives
// are in ProcessGroupNeuronCollectives.cpp.
#include "csrc/distributed/ProcessGroupNeuron.h"

#include <c10/util/Exception.h>

#include "csrc/distributed/C10dStoreAdapter.h"
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
                                       const std::string& group_name)
    : c10d::Backend(rank, size) {
  neuroncoll::GroupOptions o;
  o.store = std::make_shared<C10dStoreAdapter>(store);
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  // The store is already the group's own (c10d prefixes it per group); the
  // name tells the group's shared-memory segment apart in /dev/shm.
  o.name = "pg" + (group_name.empty() ? std::string("0") : group_name);
  check_status(neuroncoll::Group::create(o, &group_));
}

ProcessGroupNeuron::~ProcessGroupNeuron() {
  // The queued collectives use the group: let them finish first (without the
  // GIL, which a future's Python callback on the queue may need).
  if (queue_ != nullptr) blocking_wait([this] { nrtStreamDestroy(queue_); });
  retired_.clear();
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
  nrtStream_t queue = queue_for(device, name);
  std::vector<c10::intrusive_ptr<c10d::Work>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished.swap(retired_);  // released here, on the caller's thread
  }
  auto work = c10::make_intrusive<NeuronWork>(rank_, type, name, std::move(outputs));
  // The collective waits for what the caller's stream has queued so far.
  nrtEvent_t ready = nullptr;
  NEURON_CHECK(nrtEventCreate(&ready, nrtEventDisableTiming));
  nrtStatus s = nrtEventRecord(ready, current_stream_handle(device));
  if (s == nrtSuccess) s = nrtStreamWaitEvent(queue, ready);
  nrtEventDestroy(ready);  // reference counted: the wait keeps its capture
  NEURON_CHECK(s);
  neuroncoll::Group* group = group_.get();
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
                 [](neuroncoll::Group& g) { check_status(g.barrier()); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  const at::Tensor& t = single(tensors, "send");
  check_rank(dst_rank, "send", "destination");
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "send");
  StagedTensor in = stage(t, true);
  return enqueue(c10d::OpType::SEND, "send", t.device().index(), {t},
                 [in, dt, dst_rank, tag](neuroncoll::Group& g) {
                   check_status(g.send(in.data(), in.count(), dt, dst_rank, tag));
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNeuron::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  const at::Tensor& t = single(tensors, "recv");
  check_rank(src_rank, "recv", "source");
  const neuroncoll::DType dt = coll_dtype(t.scalar_type(), "recv");
  StagedTensor out = stage(t, false);
  return enqueue(c10d::OpType::RECV, "recv", t.device().index(), {t},
                 [out, dt, src_rank, tag](neuroncoll::Group& g) {
                   check_status(g.recv(out.data(), out.count(), dt, src_rank, tag));
                   out.copy_back();
                 });
}

}  // namespace torchneuron
