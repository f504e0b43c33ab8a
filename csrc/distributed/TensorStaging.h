// The tensors of a collective as its queued task uses them: CPU aliases of
// neuron memory with contiguous layout. A non-contiguous input is copied to
// a contiguous one on the caller's stream (before the collective is queued);
// a non-contiguous output gets a contiguous stand-in that the task copies
// back once the collective has run. Lists of tensors (all_gather, scatter,
// all_to_all) are packed into and unpacked from one buffer inside the task.
//
// Tasks hold CPU aliases (which keep the neuron storages alive), never the
// caller's tensors: the last reference to a tensor with a Python object must
// not be dropped on a worker thread (csrc/aten/native/KernelSupport.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torchneuron {

// Refuses (naming the collective) anything but a strided neuron tensor.
void check_neuron_tensor(const at::Tensor& t, const char* op);
// Refuses lists whose tensors differ in dtype or element count from `like`.
void check_same_shape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op,
                      const char* what);

// A CPU alias of a neuron tensor for a task (undefined stays undefined).
at::Tensor task_alias(const at::Tensor& t);
std::vector<at::Tensor> task_aliases(const std::vector<at::Tensor>& ts);
// task_alias of `t`, copied to contiguous memory first if it is not.
at::Tensor contiguous_input(const at::Tensor& t);

// A tensor the collective reads and/or writes in place.
struct StagedTensor {
  at::Tensor user;  // alias of what the caller passed
  at::Tensor buf;   // alias of contiguous memory the collective works on
  bool stand_in = false;
  // Inside the task, after the collective: the result into `user`.
  void copy_back() const;
  void* data() const { return buf.data_ptr(); }
  size_t count() const { return static_cast<size_t>(buf.numel()); }
};

// `read`: a stand-in starts with the user's values (in-place collectives).
StagedTensor stage(const at::Tensor& t, bool read);

// Inside the task: aliases `ts` laid end to end in `flat`, and back.
void pack(const std::vector<at::Tensor>& ts, const at::Tensor& flat);
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& ts);

// A new contiguous neuron buffer of `numel` elements of `like`'s dtype, on
// its device (a C++-only tensor: tasks may hold it as it is).
at::Tensor flat_buffer(const at::Tensor& like, int64_t numel);

}  // namespace torchneuron
