#include "neuroncompiler/executor.hpp"

#include <stdexcept>
#include <string>

#include "neuroncompiler/interpreter.hpp"
#include "neuroncompiler/native_ops.hpp"

namespace neuroncompiler {

void* value_data(const Program& p, const RunBuffers& b, int32_t value) {
  if (value < 0 || value >= static_cast<int32_t>(p.values.size())) return nullptr;
  const ProgramValue& v = p.values[value];
  if (v.buffer < 0) return nullptr;
  const Buffer& buf = p.buffers[v.buffer];
  char* base = nullptr;
  switch (buf.kind) {
    case Buffer::Kind::kInput: base = static_cast<char*>(b.inputs.at(static_cast<size_t>(buf.index))); break;
    case Buffer::Kind::kOutput: base = static_cast<char*>(b.outputs.at(static_cast<size_t>(buf.index))); break;
    case Buffer::Kind::kArena: base = static_cast<char*>(b.arena) + buf.index; break;
  }
  return base + v.layout.offset * dtype_size(v.layout.dtype);
}

namespace {

// `operands` is scratch, kept across steps to avoid an allocation per group.
void run_step(const Program& p, const RunBuffers& b, size_t i, ExternCalls& externs,
              const neuronkernels::ParallelFor& parallel_for, std::vector<void*>& operands) {
  const Step& s = p.steps[i];
  if (s.kind == Step::Kind::kExtern) {
    externs.call(p, b, s);  // its errors keep their type; the callback names the step
    return;
  }
  if (s.kind == Step::Kind::kNative) {
    try {
      run_native(p, b, s, parallel_for);
    } catch (const std::exception& e) {
      throw std::runtime_error("compiled program step " + std::to_string(i) + " (native " + s.node.op + "): " + e.what());
    }
    return;
  }
  try {
    operands.clear();
    for (const TileOperand& o : s.tiles.operands) operands.push_back(value_data(p, b, o.value));
    run_tile_program(s.tiles, operands, parallel_for);
  } catch (const std::exception& e) {
    throw std::runtime_error("compiled program step " + std::to_string(i) + " (fused group of " +
                             std::to_string(s.graph_nodes) + " nodes): " + e.what());
  }
}

}  // namespace

void run_program(const Program& p, const RunBuffers& b, ExternCalls& externs,
                 const neuronkernels::ParallelFor& parallel_for, StepObserver* observer) {
  if (b.inputs.size() != p.inputs.size() || b.outputs.size() != p.output_storage_bytes.size()) {
    throw std::invalid_argument("run_program: " + std::to_string(b.inputs.size()) + " inputs and " +
                                std::to_string(b.outputs.size()) + " output storages given, the program has " +
                                std::to_string(p.inputs.size()) + " and " +
                                std::to_string(p.output_storage_bytes.size()));
  }
  std::vector<void*> operands;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (observer != nullptr) [[unlikely]] observer->step_started(i);
    run_step(p, b, i, externs, parallel_for, operands);
    if (observer != nullptr) [[unlikely]] observer->step_finished(i);
  }
}

}  // namespace neuroncompiler
