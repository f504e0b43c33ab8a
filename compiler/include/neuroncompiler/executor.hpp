// Runs a program, torch-free: the caller gives the inputs' and output
// storages' memory and the arena, and runs the extern calls (ATen kernels in
// torchneuron) through ExternCalls; fused groups run on the tile
// interpreter. Steps run in order on the calling thread (the device stream's
// worker), each fused group split over `parallel_for`.
#pragma once

#include <vector>

#include "neuroncompiler/program.hpp"
#include "neuronkernels/types.hpp"

namespace neuroncompiler {

struct RunBuffers {
  std::vector<void*> inputs;   // element 0 of each input (its own offset applied)
  std::vector<void*> outputs;  // each output storage (Program::output_storage_bytes)
  void* arena = nullptr;       // Program::arena_bytes, aligned to kArenaAlignment
};

class ExternCalls {
 public:
  virtual ~ExternCalls() = default;
  // Runs step.node: reads its tensor arguments and writes its outputs at
  // value_data() of each. Its exceptions propagate unchanged (keeping their
  // type), so it names the step in them itself.
  virtual void call(const Program& program, const RunBuffers& buffers, const Step& step) = 0;
};

// Told as each step starts and finishes (a profiler timing the steps). A
// step that throws is not finished.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void step_started(size_t step) = 0;
  virtual void step_finished(size_t step) = 0;
};

// Where a value's element 0 lives, or nullptr if it has no buffer.
void* value_data(const Program& program, const RunBuffers& buffers, int32_t value);

// A fused group's failure is a std::runtime_error naming the step; an extern
// call's propagates as the callback threw it.
void run_program(const Program& program, const RunBuffers& buffers, ExternCalls& externs,
                 const neuronkernels::ParallelFor& parallel_for = neuronkernels::serial_for,
                 StepObserver* observer = nullptr);

}  // namespace neuroncompiler
