// Output metadata of an op before it runs: the op's Meta kernel on meta
// copies of the arguments, remembered per op by the arguments' metadata
// (sizes, strides, dtypes, aliasing and scalar values), so that a loop that
// repeats the same shapes pays for the Meta kernel once.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/SmallVector.h>

namespace torchneuron {

// One output tensor's metadata and where its memory comes from.
struct TensorLayout {
  bool defined = false;
  // >= 0: the i-th distinct neuron storage among the arguments (a view);
  // < 0: fresh storage number -(storage + 1).
  int storage = 0;
  c10::SmallVector<int64_t, 6> sizes, strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false, neg = false;
};

struct ReturnLayout {
  enum class Kind : uint8_t { kWrittenArg, kTensor, kTensorList, kOther } kind = Kind::kOther;
  // kWrittenArg: if the kernel resizes the argument, its new layout and the
  // bytes its storage needs; kTensor: one entry; kTensorList: the elements.
  std::vector<TensorLayout> tensors;
  bool resized = false;
  size_t resized_nbytes = 0;
};

struct OutputLayout {
  std::vector<ReturnLayout> returns;
  std::vector<size_t> fresh_nbytes;  // bytes of each fresh storage
  // Meta kernels check less than CPU kernels do (dtypes, strides, scalar
  // ranges). The first call of each signature therefore runs the CPU kernel
  // at once, so argument errors surface at the op; the layout is used for
  // queued calls only once that run agreed with it.
  enum State : uint8_t { kUnvalidated, kValidated, kSyncOnly };
  mutable std::atomic<uint8_t> state{kUnvalidated};
};

// What inference needs to know about the op's schema.
struct SchemaFacts {
  std::vector<int> ret_written_arg;  // per return: argument it writes, or -1
  std::vector<bool> arg_is_generator;
  // Floating-point scalar arguments (learning rates, alphas, eps) vary from
  // call to call but never change an op's output layout, so signatures key
  // them by type only, except for ops whose output shape follows their
  // values (arange, range). Lists of floats (scale factors) key by value.
  bool key_float_values = false;
};

// The arguments' neuron storages in order of first appearance, and the
// cache key. Built by one walk over the arguments.
struct ArgSignature {
  c10::SmallVector<c10::StorageImpl*, 4> storages;
  c10::SmallVector<int64_t, 64> key;  // inline: no allocation per op
  bool cacheable = true;
};
ArgSignature signature_of(const torch::jit::Stack& args, const SchemaFacts& facts);

// A coarser key: tensor sizes only as 0, 1 or "more", contiguity instead of
// strides. Signatures of one class fail or pass the CPU kernel's argument
// checks alike (Meta kernels already checked the exact shapes), so one
// validated signature vouches for its class: a sequence growing by a token
// per step does not run each new length synchronously.
ArgSignature shape_class_of(const torch::jit::Stack& args, const SchemaFacts& facts);

class InferenceCache {
 public:
  // After this many signatures validated in agreement with their Meta
  // layout, an op's new signatures are trusted without a synchronous first
  // run (ops fed ever-changing shapes would otherwise sync on every call).
  static constexpr int kTrustAfter = 64;
  bool trusted() const { return validated_.load(std::memory_order_relaxed) >= kTrustAfter; }
  // A signature of this class (shape_class_of) was validated.
  bool class_validated(const ArgSignature& shape_class);
  void note_validated(const ArgSignature& shape_class);

  // The outputs' layout. When the Meta kernel cannot tell (no Meta kernel,
  // shapes that depend on the data), a layout in state kSyncOnly: the
  // signature runs synchronously. Thread-safe.
  std::shared_ptr<const OutputLayout> infer(const c10::OperatorHandle& op,
                                            const SchemaFacts& facts,
                                            const torch::jit::Stack& args,
                                            const ArgSignature& sig);

 private:
  struct Entry {
    std::vector<int64_t> key;
    std::shared_ptr<const OutputLayout> layout;
  };
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<Entry>> entries_;  // by key hash
  size_t size_ = 0;
  std::atomic<int> validated_{0};
  std::unordered_map<size_t, std::vector<std::vector<int64_t>>> validated_classes_;
};

}  // namespace torchneuron
