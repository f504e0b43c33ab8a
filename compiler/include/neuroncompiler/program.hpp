// A compiled program: the ordered steps (fused groups run by the tile
// interpreter, nodes run as extern calls by the caller) and where every value
// lives: in an input, in one of the output storages the caller allocates, or
// at an offset of the one arena. Serializable to bytes and back (versioned),
// so that a program can be cached without recompiling.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "neuroncompiler/ir.hpp"
#include "neuroncompiler/tile_program.hpp"

namespace neuroncompiler {

inline constexpr uint32_t kProgramFormatVersion = 3;  // 3: the activation backwards' tile ops

struct Buffer {
  enum class Kind : uint8_t { kInput, kOutput, kArena };
  Kind kind = Kind::kArena;
  int64_t index = 0;   // kInput: input index; kOutput: output storage index; kArena: byte offset
  int64_t nbytes = 0;
  bool operator==(const Buffer&) const = default;
};

struct ProgramValue {
  Layout layout;       // offset: elements from the start of the buffer
  int32_t buffer = -1; // index into Program::buffers; -1: never in memory
  bool operator==(const ProgramValue&) const = default;
};

struct Step {
  // kNative: one of the device's kernels (native_ops.hpp) the executor runs itself.
  enum class Kind : uint8_t { kFused, kExtern, kNative };
  Kind kind = Kind::kExtern;
  TileProgram tiles;            // kFused
  Node node;                    // kExtern, kNative: the node (args and outputs are value ids)
  int32_t graph_nodes = 1;      // graph nodes the step runs
  bool operator==(const Step&) const = default;
};

struct Program {
  std::vector<ProgramValue> values;
  std::vector<Buffer> buffers;
  std::vector<int32_t> inputs;
  std::vector<std::string> input_names;
  std::vector<int32_t> outputs;              // value ids; -1 for None
  std::vector<int64_t> output_storage_bytes; // what the caller allocates, per output storage
  int64_t arena_bytes = 0;
  std::vector<Step> steps;
  // Graph nodes the compiler removed (a cached program reports them too):
  // scalar constants folded into groups, copies back made unnecessary by re-inplacing.
  int32_t folded = 0, reinplaced = 0;
  bool operator==(const Program&) const = default;

  std::string serialize() const;
  // Throws CompileError on a wrong magic, another version, or a truncated or
  // inconsistent program.
  static Program deserialize(std::string_view bytes);

  int fused_groups() const;
  int extern_calls() const;
  int native_kernels() const;
  int native_nodes() const;  // graph nodes inside native steps
  int fused_nodes() const;   // graph nodes inside fused groups
  int library_calls() const; // extern matrix products (oneDNN/MKL or the skinny matmul)
  // A readable listing (steps, buffers), for debug dumps.
  std::string describe() const;
  // A step's short name, for profilers: an extern or native step's op
  // ("aten::mm.default", "neuron::attention"); a fused group's iteration
  // space and operations ("fused [512, 32000]: exp sub sum (6 nodes)").
  std::string step_name(size_t step) const;
};

// A matrix product (the GEMM libraries ATen calls, or the device's skinny matmul).
bool is_library_call(std::string_view op);

}  // namespace neuroncompiler
