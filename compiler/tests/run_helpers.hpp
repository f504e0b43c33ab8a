// Running a compiled graph in the tests: buffers for inputs (filled with
// random data, read through their layouts), output storages and the arena,
// and an extern-call table of test ops.
#pragma once

#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/executor.hpp"
#include "reference.hpp"

namespace nc_test {

struct AlignedBytes {
  explicit AlignedBytes(int64_t n) : bytes(static_cast<size_t>(n) + 64) {}
  void* data() {
    auto p = reinterpret_cast<uintptr_t>(bytes.data());
    return reinterpret_cast<void*>((p + 63) & ~uintptr_t(63));
  }
  std::vector<unsigned char> bytes;
};

// Extern calls by op name, each given the program, the buffers and the step.
class TestExterns : public ExternCalls {
 public:
  using Fn = std::function<void(const Program&, const RunBuffers&, const Step&)>;
  std::map<std::string, Fn> ops;
  int calls = 0;
  void call(const Program& p, const RunBuffers& b, const Step& s) override {
    ++calls;
    auto it = ops.find(s.node.op);
    if (it == ops.end()) throw std::runtime_error("no test extern for " + s.node.op);
    it->second(p, b, s);
  }
};

// Four threads over contiguous ranges: exercises the interpreter's split.
inline void threaded_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t parts = std::min<int64_t>(4, n);
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < parts; ++t) threads.emplace_back([&, t] { body(n * t / parts, n * (t + 1) / parts); });
  if (parts > 0) body(0, n / parts);
  for (auto& th : threads) th.join();
}

struct CompiledRun {
  Program program;
  std::vector<AlignedBytes> inputs, outputs;
  AlignedBytes arena{0};
  RunBuffers buffers;

  // The bytes of output i's value, read as doubles in logical order.
  std::vector<double> output(size_t i) const {
    const int32_t id = program.outputs[i];
    const Layout& l = program.values[id].layout;
    const char* base = static_cast<const char*>(value_data(program, buffers, id)) - l.offset * dtype_size(l.dtype);
    std::vector<double> out(static_cast<size_t>(l.numel()));
    for (int64_t e = 0; e < l.numel(); ++e) {
      out[e] = read_element(l.dtype, base + Reference::memory_index(l, e) * dtype_size(l.dtype));
    }
    return out;
  }
};

inline void fill_random(const Layout& l, void* data, std::mt19937& rng) {
  std::uniform_real_distribution<double> dist(-3, 3);
  const int64_t n = l.extent();
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(rng);
    if (l.dtype == DType::kInt64 || l.dtype == DType::kInt32) v = std::round(v * 10);
    if (l.dtype == DType::kBool) v = v > 0;
    write_element(l.dtype, static_cast<char*>(data) + i * dtype_size(l.dtype), v);
  }
}

// Compiles `g` and fills its inputs with random values (seeded), ready to run.
inline CompiledRun compile_with_inputs(const Graph& g, unsigned seed = 1) {
  CompiledRun r;
  r.program = compile_graph(g);
  std::mt19937 rng(seed);
  for (int32_t id : g.inputs) {
    const Layout& l = g.value(id).layout;
    r.inputs.emplace_back(std::max<int64_t>(l.extent() * dtype_size(l.dtype), 1));
    fill_random(l, r.inputs.back().data(), rng);
  }
  for (int64_t bytes : r.program.output_storage_bytes) r.outputs.emplace_back(std::max<int64_t>(bytes, 1));
  r.arena = AlignedBytes(r.program.arena_bytes);
  for (auto& b : r.inputs) r.buffers.inputs.push_back(b.data());
  for (auto& b : r.outputs) r.buffers.outputs.push_back(b.data());
  r.buffers.arena = r.arena.data();
  return r;
}

inline CompiledRun compile_and_run(const Graph& g, TestExterns* externs = nullptr, unsigned seed = 1,
                           const neuronkernels::ParallelFor& pf = neuronkernels::serial_for,
                           StepObserver* observer = nullptr) {
  CompiledRun r = compile_with_inputs(g, seed);
  TestExterns none;
  run_program(r.program, r.buffers, externs ? *externs : none, pf, observer);
  return r;
}

inline std::vector<const void*> input_pointers(const CompiledRun& r) {
  std::vector<const void*> out;
  for (void* p : r.buffers.inputs) out.push_back(p);
  return out;
}

}  // namespace nc_test
