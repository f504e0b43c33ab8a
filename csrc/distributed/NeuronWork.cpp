#include "csrc/distributed/NeuronWork.h"

#include <ATen/core/jit_type.h>


#include "csrc/distributed/EnvFlag.h"
#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronStream.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

bool dist_blocking_wait() {
  static const bool on = env_flag("TORCHNEURON_DIST_BLOCKING_WAIT").value_or(false);
  return on;
}

bool dist_inline() {
  static const bool on = env_flag("TORCHNEURON_DIST_INLINE").value_or(true);
  return on;
}

NeuronWork::NeuronWork(int rank, c10d::OpType type, const char* name,
                       std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type, name),
      outputs_(std::move(outputs)),
      // No devices: the values are complete when the future is (the queue
      // has run the collective), so the future needs no device events.
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))),
      name_(name) {}

bool NeuronWork::host_wait(std::chrono::milliseconds timeout) {
  bool done = false;
  // The queue's worker may need the GIL (a tensor's last reference), so the
  // wait releases it.
  blocking_wait([&] {
    if (run_here_ && !isCompleted()) run_here_(timeout);  // no hand-off back from the queue's thread
    done = c10d::Work::wait(timeout);
  });
  return done;
}

bool NeuronWork::wait(std::chrono::milliseconds timeout) {
  if (isCompleted() || dist_blocking_wait() || timeout != kNoTimeout ||
      retrieveOpType() == c10d::OpType::BARRIER || device_ < 0) {
    return host_wait(timeout);
  }
  synchronize();
  return true;
}

void NeuronWork::synchronize() {
  if (device_ < 0) return;
  {
    // Ran already (c10d's blocking wait() calls this after its wait, with the
    // work's own lock held): the result is in memory, nothing to order.
    std::lock_guard<std::mutex> lock(done_->mu);
    if (done_->done) {
      if (done_->error) std::rethrow_exception(done_->error);
      return;
    }
  }
  // A task on the caller's stream that waits for the collective (the stream's
  // worker blocks, as a device stream waits on an event) and fails with its
  // error, which the stream then reports at its next synchronization.
  std::shared_ptr<Done> done = done_;
  NEURON_TRY {
    neuronrt::launch(current_stream_handle(device_), name_, [done] {
      std::unique_lock<std::mutex> lock(done->mu);
      done->cv.wait(lock, [&] { return done->done; });  // the collective's wait is bounded
      if (done->error) std::rethrow_exception(done->error);
    });
  }
  NEURON_CATCH
}

std::vector<at::Tensor> NeuronWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> NeuronWork::getFuture() { return future_; }

void NeuronWork::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(done_->mu);
    done_->done = true;
    done_->error = error;
  }
  done_->cv.notify_all();
  // Waiters first; the future's callbacks (comm hooks) may take longer.
  finish(error);
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace torchneuron
