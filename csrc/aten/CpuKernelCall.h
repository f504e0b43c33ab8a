// Running an ATen CPU kernel on device buffers: the kernel's arguments
// (neuron tensors as CPU aliases of their buffers, neuron generators as the
// CPU generators inside them, neuron devices as CPU), the call, and its
// results brought into device buffers. The boxed fallback's queued and
// synchronous runs are made of these steps; so is any other code that runs
// an ATen CPU kernel on device buffers (a queued program's extern calls).
// Aliases read device memory: use them inside queued work, or on the host
// after the stream has been synchronized.
#pragma once

#include <utility>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

namespace torchneuron {

// Maps tensors for a CPU kernel: a neuron tensor becomes a CPU alias of its
// buffer, with one alias storage per neuron storage, so that the kernel's
// aliasing checks see the truth; other tensors pass through. Callable as a
// tensor mapping (map_tensors, csrc/aten/IValueTensors.h).
class CpuAliases {
 public:
  struct Options {
    // The kernel may resize written arguments (synchronous runs; the caller
    // follows the resize, see WrittenArguments).
    bool resizable = false;
    // For queued work: host tensors that are not 0-dim (CPU index tensors)
    // are copied (the caller may change them before the work runs), and
    // device buffers are aliased with queued_alias (csrc/aten/Launch.h).
    bool queued = false;
  };
  CpuAliases() = default;
  explicit CpuAliases(Options options) : options_(options) {}

  at::Tensor operator()(const at::Tensor& t);

  // The neuron tensor a CPU result stands for when it lives in an alias
  // storage (a view of an argument's device buffer), else undefined.
  at::Tensor neuron_view_of(const at::Tensor& cpu) const;

 private:
  Options options_;
  // Few storages per op: linear search beats hashing. (neuron, alias) pairs.
  c10::SmallVector<std::pair<c10::StorageImpl*, at::Tensor>, 4> bases_;
};

// The arguments as the CPU kernel must see them: generator arguments
// (arg_is_generator[i]) replaced by the CPU generator of the given or the
// device's default neuron generator, neuron devices by CPU, tensors mapped
// by `aliases`. op_name names the op in errors.
torch::jit::Stack cpu_arguments(const torch::jit::Stack& args,
                                const std::vector<bool>& arg_is_generator,
                                c10::DeviceIndex device, const char* op_name,
                                CpuAliases& aliases);

// Runs `op`'s CPU kernel on a stack of CPU arguments, below autograd (the
// neuron op's autograd has run already). Leaves the returns on the stack.
void call_cpu_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Copies a CPU kernel's returns (`results`) into the device buffers meant
// for them: targets[r] is None (skipped), or CPU aliases of the device
// output(s) of return r (a tensor, or a list whose undefined entries are
// skipped).
void copy_into(const torch::jit::Stack& targets, const torch::jit::Stack& results);

// For an out= kernel given CPU aliases of fresh device buffers: `passed` the
// out= arguments as given to the kernel (resizable aliases), `expected`
// plain aliases of the same buffers. A kernel that used an output as scratch
// of another shape has moved it to host memory; its result is copied into
// the device buffer. Returns false if any output moved.
bool copy_moved_outputs(const std::vector<at::Tensor>& passed,
                        const std::vector<at::Tensor>& expected);

// The written neuron arguments of a synchronous call and their resizable
// aliases, to follow on the device tensors what the kernel did to them.
class WrittenArguments {
 public:
  WrittenArguments(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                   const torch::jit::Stack& cpu_args);
  // A kernel that resized a written argument (out= of the wrong shape):
  // the device tensor takes its new metadata, and its data if it got new
  // memory.
  void follow_resizes() const;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs_;  // (neuron, alias)
};

// A fresh neuron tensor holding a copy of a host tensor (dense, with the
// host tensor's sizes and strides, or contiguous if it is not dense). The
// stream must be synchronized.
at::Tensor upload_fresh(const at::Tensor& cpu, c10::DeviceIndex device, const char* op_name);

}  // namespace torchneuron
