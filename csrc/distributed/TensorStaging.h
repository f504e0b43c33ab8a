// The tensors of a collective as neuroncoll wants them: neuron tensors with
// contiguous memory. A non-contiguous input is copied to a contiguous one on
// the caller's stream (before the collective is queued); a non-contiguous
// output gets a contiguous stand-in that the collective's own task copies
// back once it has run. Lists of tensors (all_gather, scatter, all_to_all)
// are packed into and unpacked from one contiguous buffer inside the task.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torchneuron {

// Refuses (naming the collective) anything but a strided neuron tensor.
void check_neuron_tensor(const at::Tensor& t, const char* op);
// Refuses lists whose tensors differ in dtype or element count from `like`.
void check_same_shape(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* op,
                      const char* what);

// A tensor the collective reads and/or writes in place.
struct StagedTensor {
  at::Tensor user;  // what the caller passed
  at::Tensor buf;   // contiguous memory the collective works on
  // Inside the task, after the collective: the result into `user` if `buf`
  // is a stand-in.
  void copy_back() const;
  void* data() const { return buf.data_ptr(); }
  size_t count() const { return static_cast<size_t>(buf.numel()); }
};

// `read`: the stand-in starts with the user's values (in-place collectives).
StagedTensor stage(const at::Tensor& t, bool read);

// Inside the task: `ts` laid end to end in `flat` (contiguous), and back.
void pack(const std::vector<at::Tensor>& ts, const at::Tensor& flat);
void unpack(const at::Tensor& flat, const std::vector<at::Tensor>& ts);

// A contiguous neuron buffer for `numel` elements of `like`'s dtype, on its device.
at::Tensor flat_buffer(const at::Tensor& like, int64_t numel);

}  // namespace torchneuron
