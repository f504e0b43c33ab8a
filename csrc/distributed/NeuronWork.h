// The asynchronous handle of one collective of ProcessGroupNeuron. The
// collective runs on the group's queue (a device stream of its own, ordered
// after the work the caller's current stream had queued); wait() blocks the
// calling host thread until it has run, so every op issued afterwards, on
// any stream, sees its result. The future completes with the outputs (DDP's
// comm hooks chain on it) or with the collective's error.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <vector>

namespace torchneuron {

class NeuronWork final : public c10d::Work {
 public:
  NeuronWork(int rank, c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);

  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Called on the queue's worker thread when the collective has run.
  void complete(std::exception_ptr error);

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torchneuron
