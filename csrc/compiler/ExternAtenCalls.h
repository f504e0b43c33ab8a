// The extern calls of a compiled program: nodes the compiler does not lower
// run as their ATen CPU kernels on device buffers (csrc/aten/CpuKernelCall.h:
// CPU aliases of the buffers, generators and devices mapped, the call, the
// results copied into the buffers the program planned for them). Resolved
// once at compile time; run inside the program's task on the stream worker.
// mm / addmm with few rows run the device's skinny matmul instead, as eager
// neuron does (csrc/aten/native/Matmul.h).
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Storage.h>

#include "neuroncompiler/executor.hpp"

namespace torchneuron {

// The storages one run of a program uses, indexed as Program::buffers names
// them, with the inputs' storage offsets (bytes).
struct ProgramStorages {
  std::vector<c10::Storage> inputs;
  std::vector<int64_t> input_offset_bytes;  // each input's storage offset, in bytes
  std::vector<c10::Storage> outputs;
  c10::Storage arena;
};

// The torch scalar type of a compiler dtype, and back.
c10::ScalarType scalar_type_of(neuroncompiler::DType dtype);

// A neuron tensor for `value` over the run's storages (undefined if the value
// has no buffer).
at::Tensor value_tensor(const neuroncompiler::Program& program, const ProgramStorages& storages,
                        int32_t value);

class ExternAtenCalls {
 public:
  // Resolves every extern step's operator; throws c10::Error naming the step
  // and op when one is unknown or its arguments do not fit the schema.
  explicit ExternAtenCalls(const neuroncompiler::Program& program);

  // Runs extern step `step` of `program` on the run's storages.
  void call(const neuroncompiler::Program& program, const neuroncompiler::Step& step,
            const ProgramStorages& storages, c10::DeviceIndex device) const;


 private:
  enum class Runner : uint8_t {
    kAten,               // the op's ATen CPU kernel (its out= overload where it has one)
    kCopyInto,           // the compiler's copy into a view (neuroncompiler::kCopyInto)
    kUninitialized,      // empty, new_empty, ...: the planned buffer as it is, no work (ATen's
                         // kernel would fault in fresh memory to be copied there)
    kMm,                 // mm, addmm, bmm, baddbmm: the skinny matmul or oneDNN
    kAddmm,
    kBmm,
    kBaddbmm,
    kUpcastMm,           // mm.dtype, addmm.dtype: the mixed-precision GEMM
    kUpcastAddmm,
    kSliceScatter,       // slice_scatter, select_scatter: into the planned buffer
    kSelectScatter,
    kEmbeddingBackward,  // embedding_dense_backward: into the planned buffer
  };
  static Runner runner_of(const std::string& op);
  struct Resolved {
    c10::OperatorHandle op;
    std::vector<bool> arg_is_generator;
    // The op's out= overload (as the eager fallback finds it): results are
    // written straight into the planned buffers instead of copied there.
    std::optional<c10::OperatorHandle> out_op;
    std::atomic<bool>* out_op_ok = nullptr;  // shared with eager: false once a kernel used out= as scratch
    // The largest tensor the call touches and whether it is a matrix product:
    // whether the worker lends ATen's kernel its OpenMP team for this step
    // (csrc/runtime/WorkerThreads.h). 0 for the skinny matmul's products.
    int64_t elements = 0;
    bool matrix = false;
    // How the step runs, chosen once from its op; a special runner may still
    // decline a call whose layouts its kernel does not take (the ATen call runs).
    Runner runner = Runner::kAten;
  };
  static bool run_skinny_matmul(const neuroncompiler::Program& program, const neuroncompiler::Step& step,
                                const ProgramStorages& storages, Runner form);
  static bool run_onednn_gemm(const neuroncompiler::Program& program, const neuroncompiler::Step& step,
                              const ProgramStorages& storages, Runner form);
  static bool run_upcast_gemm(const neuroncompiler::Program& program, const neuroncompiler::Step& step,
                              const ProgramStorages& storages, Runner form);
  static bool run_scatter_into_view(const neuroncompiler::Program& program, const neuroncompiler::Step& step,
                                    const ProgramStorages& storages, Runner form);
  static bool run_embedding_backward_into(const neuroncompiler::Program& program, const neuroncompiler::Step& step,
                                          const ProgramStorages& storages);
  static void run(const Resolved& r, const neuroncompiler::Program& program, const neuroncompiler::Step& step,
                  const ProgramStorages& storages, c10::DeviceIndex device);

  std::vector<std::optional<Resolved>> by_step_;  // indexed by step; set for extern steps
};

class CollectiveTurns;  // csrc/compiler/ProgramCollectives.h

// The executor's callback for one run: the resolved calls and that run's
// storages; collective steps go to their turns (null: none).
class BoundExternCalls final : public neuroncompiler::ExternCalls {
 public:
  BoundExternCalls(const ExternAtenCalls& calls, const ProgramStorages& storages, c10::DeviceIndex device,
                   CollectiveTurns* collectives = nullptr)
      : calls_(calls), storages_(storages), device_(device), collectives_(collectives) {}
  void call(const neuroncompiler::Program& program, const neuroncompiler::RunBuffers&,
            const neuroncompiler::Step& step) override;

 private:
  const ExternAtenCalls& calls_;
  const ProgramStorages& storages_;
  c10::DeviceIndex device_;
  CollectiveTurns* collectives_;
};

}  // namespace torchneuron
