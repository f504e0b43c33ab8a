#include "csrc/distributed/NeuronWork.h"

#include <ATen/core/jit_type.h>

#include "csrc/runtime/BlockingWait.h"

namespace torchneuron {

NeuronWork::NeuronWork(int rank, c10d::OpType type, const char* name,
                       std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, name),
      outputs_(std::move(outputs)),
      // No devices: the values are complete when the future is (the queue
      // has run the collective), so the future needs no device events.
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

bool NeuronWork::wait(std::chrono::milliseconds timeout) {
  bool done = false;
  // The queue's worker may need the GIL (a tensor's last reference), so the
  // wait releases it.
  blocking_wait([&] { done = c10d::Work::wait(timeout); });
  return done;
}

// Completed work has its results in device memory already (c10d's wait()
// calls this after the wait).
void NeuronWork::synchronize() {}

std::vector<at::Tensor> NeuronWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> NeuronWork::getFuture() { return future_; }

void NeuronWork::complete(std::exception_ptr error) {
  // Waiters first; the future's callbacks (comm hooks) may take longer.
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace torchneuron
