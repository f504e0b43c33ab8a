// The compiler's IR: values with a layout over a buffer (views are metadata
// over a base value's buffer, never nodes), nodes with an op name and
// arguments, the graph's inputs and outputs. Input mutations are nodes of op
// kCopyInto that write a value into an input's buffer.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "neuroncompiler/dtype.hpp"

namespace neuroncompiler {

// Raised for a graph or program the compiler cannot take; the message names
// the node, value or line.
struct CompileError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A well-formed graph with a node that has no kernel to run it in a program
// (the device's own ops whose arguments its kernels do not take): the caller
// runs the graph another way (torchneuron: eagerly, with this reason).
struct NotLowered : CompileError {
  using CompileError::CompileError;
};

// The op name of an input mutation: args (dst tensor, src tensor), no outputs.
inline constexpr const char* kCopyInto = "aten::copy_";

// Sizes and strides in elements; offset in elements from the start of the
// base buffer.
struct Layout {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  int64_t numel() const;
  // One past the largest element index it touches (offset included); 0 when empty.
  int64_t extent() const;
  bool is_contiguous() const;
  bool operator==(const Layout&) const = default;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);

struct Value {
  int32_t id = 0;
  Layout layout;
  int32_t base = -1;  // -1: owns its buffer; else the value whose buffer it views
  bool is_view() const { return base >= 0; }
};

struct Arg {
  enum class Kind : uint8_t { kTensor, kInt, kFloat, kBool, kNone, kIntList, kFloatList, kTensorList, kDevice, kString };
  Kind kind = Kind::kNone;
  int64_t i = 0;             // kTensor: value id; kInt, kBool, kDevice: the value
  double f = 0;              // kFloat
  std::vector<int64_t> ints; // kIntList; kTensorList: value ids, -1 for None
  std::vector<double> floats;
  std::string s;

  static Arg tensor(int32_t id) { Arg a; a.kind = Kind::kTensor; a.i = id; return a; }
  static Arg integer(int64_t v) { Arg a; a.kind = Kind::kInt; a.i = v; return a; }
  static Arg real(double v) { Arg a; a.kind = Kind::kFloat; a.f = v; return a; }
  static Arg boolean(bool v) { Arg a; a.kind = Kind::kBool; a.i = v; return a; }
  static Arg none() { return Arg{}; }
  static Arg int_list(std::vector<int64_t> v) { Arg a; a.kind = Kind::kIntList; a.ints = std::move(v); return a; }
  bool is_scalar() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  double scalar() const { return kind == Kind::kFloat ? f : static_cast<double>(i); }
  bool operator==(const Arg&) const = default;
};

struct Node {
  std::string op;                // "aten::add.Tensor" (schema name and overload)
  std::vector<Arg> args;         // every schema argument, in order
  std::vector<int32_t> outputs;  // value ids; -1 for a result nobody uses
  // Graph nodes this node stands for: 1, or more for a node the pattern pass
  // put in place of a subgraph (neuroncompiler/patterns.hpp). Not serialized
  // in the graph text (Python never writes pattern nodes).
  int32_t replaces = 1;
  bool operator==(const Node&) const = default;
};

// The value ids a node reads: its tensor arguments and the tensors of its
// tensor lists, in argument order (repeats kept, None skipped).
std::vector<int32_t> tensor_args(const Node& n);
// Makes every argument of `n` that names value `from` name `to` instead.
void rename_tensor_arg(Node& n, int32_t from, int32_t to);

struct Graph {
  std::vector<Value> values;       // ids are indices
  std::vector<int32_t> inputs;     // value ids, in call order
  std::vector<std::string> input_names;
  std::vector<Node> nodes;         // in execution order
  std::vector<int32_t> outputs;    // value ids; -1 for a None output

  const Value& value(int32_t id) const { return values.at(static_cast<size_t>(id)); }
  // The value owning id's buffer (id itself unless it is a view).
  int32_t root(int32_t id) const { return values[id].is_view() ? values[id].base : id; }
  // Checks ids, definitions before uses, views over owning values; throws
  // CompileError naming what is wrong.
  void validate() const;
  // "node 3 (aten::mm.default)": how errors name a node.
  std::string describe_node(size_t index) const;
};

}  // namespace neuroncompiler
