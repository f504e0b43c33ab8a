// The asynchronous handle of one collective of ProcessGroupNeuron. The
// collective runs on the group's queue (a device stream of its own, ordered
// after the work the caller's current stream had queued).
//
// wait() does what CUDA's NCCL does: it orders the caller's current stream
// after the collective and returns without blocking the host (ops issued
// afterwards on that stream see the result; a failure of the collective is
// raised, as the DistBackendError it is, at that stream's next
// synchronization). It blocks the host instead when the collective already
// finished (and raises its error at once), for barriers (a host barrier),
// when given an explicit timeout, and under TORCHNEURON_DIST_BLOCKING_WAIT=1.
// The future completes with the outputs (DDP's comm hooks chain on it) or
// with the collective's error.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace torchneuron {

class NeuronWork final : public c10d::Work {
 public:
  NeuronWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);

  bool wait(std::chrono::milliseconds timeout) override;
  // Orders the caller's current stream after the collective (no host wait).
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // The device whose streams wait() orders (set when the work is queued).
  void bind(c10::DeviceIndex device) { device_ = device; }
  // Called on the queue's worker thread when the collective has run.
  void complete(std::exception_ptr error);
  // Set before the work is queued: a host wait calls `fn` with its timeout
  // first, which may run the collective on the waiting thread
  // (ProcessGroupNeuron::take_turn).
  using RunHere = std::function<void(std::chrono::milliseconds)>;
  void set_run_here(RunHere fn) { run_here_ = std::move(fn); }

 private:
  // Completion as tasks on other streams wait for it: shared, so that such
  // a task never holds the work (whose outputs may have Python objects).
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  bool host_wait(std::chrono::milliseconds timeout);

  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Done> done_ = std::make_shared<Done>();
  c10::DeviceIndex device_ = -1;
  const char* name_;
  RunHere run_here_;
};

// TORCHNEURON_DIST_BLOCKING_WAIT=1: every wait() blocks the host (read once).
bool dist_blocking_wait();
// TORCHNEURON_DIST_INLINE (default on; 0 turns it off): a collective whose
// caller waits at once may run on the caller's thread (ProcessGroupNeuron).
bool dist_inline();

}  // namespace torchneuron
