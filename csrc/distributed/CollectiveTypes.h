// What torch.distributed hands the backend, in neuroncoll's terms: element
// types, reduce ops (with PREMUL_SUM's factor), and failed Status values as
// the exceptions Python sees.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "neuroncoll/status.hpp"
#include "neuroncoll/types.hpp"

namespace torchneuron {

// The neuroncoll type of a tensor's elements; refuses (naming `op` and the
// dtype) the types neuroncoll has no kernels for (complex arrives here as
// real pairs, which c10d makes with view_as_real for the ops that allow it).
neuroncoll::DType coll_dtype(c10::ScalarType type, const char* op);

neuroncoll::ReduceOp coll_reduce_op(const c10d::ReduceOp& op, const char* collective);

// This rank's PREMUL_SUM factor (1.0 for other ops), taken on the caller's
// thread. A neuron tensor factor is read when the collective runs (after the
// work queued before it), through a CPU alias; the task never holds the
// caller's tensor.
class PremulFactor {
 public:
  explicit PremulFactor(const c10d::ReduceOp& op);
  double value() const;  // inside the task

 private:
  double value_ = 1.0;
  at::Tensor alias_;
};

// Throws c10::DistBackendError "neuron <what>: <code>: <message>" for a
// failed status (which Python sees as torch.distributed.DistBackendError, a
// RuntimeError).
void check_status(const neuroncoll::Status& status);

}  // namespace torchneuron
