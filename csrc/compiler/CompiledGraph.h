// A graph compiled by neuroncompiler, run on the device as ONE task on the
// current stream per call: the outputs' storages and the arena come from the
// device allocator, then the task runs every step of the program (fused
// groups on the tile interpreter, the rest as extern ATen CPU kernel calls).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "csrc/compiler/ExternAtenCalls.h"
#include "csrc/compiler/ProgramCollectives.h"
#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/program.hpp"

namespace torchneuron {

class CompiledGraph {
 public:
  // Parses and compiles the serialized graph (compiler/include/neuroncompiler/
  // graph_format.hpp). `label` names the graph in errors ("graph 3 (forward)").
  // Throws c10::Error with the compiler's message (NotImplementedError for a
  // graph the compiler does not lower). keep_ir keeps the IR after each pass
  // in the report (debug dumps).
  static std::shared_ptr<CompiledGraph> compile(const std::string& graph_text, const std::string& label,
                                                bool keep_ir = false);
  // What compile() tells the compiler of this process's target
  // (neuroncompiler::CompileOptions), as text for the program cache's key.
  static std::string target();
  // Whether compile() applies the mixed-precision GEMM pattern on this target
  // (the product of bfloat16 operands cast to float32 as one mm.dtype).
  static bool mixed_precision_gemm();
  // A program from Program::serialize() bytes.
  static std::shared_ptr<CompiledGraph> load(const std::string& program_bytes, const std::string& label);

  // Checks the inputs against the program (neuron tensors of one device, the
  // compiled dtypes, sizes and strides), allocates, queues the task and
  // returns the outputs (undefined for a None output). Outputs viewing an
  // input are views of that input.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  const neuroncompiler::Program& program() const { return *program_; }
  const neuroncompiler::CompileReport& report() const { return report_; }
  const std::string& label() const { return label_; }

 private:
  CompiledGraph(neuroncompiler::Program program, neuroncompiler::CompileReport report, std::string label);
  void check_inputs(const std::vector<at::Tensor>& inputs) const;

  std::shared_ptr<const neuroncompiler::Program> program_;
  neuroncompiler::CompileReport report_;
  std::string label_;
  std::string task_name_;  // the stream task's name (outlives the task: the task holds this object)
  // Program::step_name of each step: a profiled run records each step under it.
  std::shared_ptr<const std::vector<std::string>> step_names_;
  std::shared_ptr<ExternAtenCalls> externs_;
  std::shared_ptr<ProgramCollectives> collectives_;  // functional collectives, run in the group's order
};

}  // namespace torchneuron
