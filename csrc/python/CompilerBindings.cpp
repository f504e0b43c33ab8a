#include "csrc/compiler/CompiledGraph.h"
#include "csrc/python/Bindings.h"
#include "neuronrt/neuronrt.hpp"

namespace py = pybind11;

namespace torchneuron::python {

void bind_compiler(py::module_& m) {
  py::class_<CompiledGraph, std::shared_ptr<CompiledGraph>>(m, "_CompiledGraph")
      .def("run", &CompiledGraph::run, py::arg("inputs"))
      .def_property_readonly("report", [](const CompiledGraph& g) {
        const auto& r = g.report();
        py::dict d;
        d["fused_groups"] = r.fused_groups;
        d["fused_nodes"] = r.fused_nodes;
        d["extern"] = r.extern_calls;
        d["native_kernels"] = r.native_kernels;
        d["native_nodes"] = r.native_nodes;
        d["reinplaced"] = r.reinplaced;
        d["folded"] = r.folded;
        d["library_calls"] = r.library_calls;
        py::dict extern_ops;  // op -> extern steps running it
        for (const auto& s : g.program().steps) {
          if (s.kind != neuroncompiler::Step::Kind::kExtern) continue;
          const py::str op(s.node.op);
          extern_ops[op] = (extern_ops.contains(op) ? extern_ops[op].cast<int>() : 0) + 1;
        }
        d["extern_ops"] = extern_ops;
        d["arena_bytes"] = r.arena_bytes;
        d["output_bytes"] = [&] {
          int64_t total = 0;
          for (int64_t b : g.program().output_storage_bytes) total += b;
          return total;
        }();
        py::dict times;
        times["parse"] = r.parse_ms;
        times["patterns"] = r.patterns_ms;
        times["fusion"] = r.fusion_ms;
        times["lowering"] = r.lowering_ms;
        times["planning"] = r.planning_ms;
        d["times_ms"] = times;
        d["ir"] = py::dict(py::arg("patterns") = r.ir_patterns, py::arg("fusion") = r.ir_fusion);
        return d;
      })
      .def("describe", [](const CompiledGraph& g) { return g.program().describe(); })
      .def("serialize", [](const CompiledGraph& g) { return py::bytes(g.program().serialize()); });
  m.def("_compile_graph", &CompiledGraph::compile, py::arg("graph_text"), py::arg("label"),
        py::arg("keep_ir") = false);
  m.def("_compile_target", &CompiledGraph::target);
  m.def("_compile_mixed_precision_gemm", &CompiledGraph::mixed_precision_gemm);
  m.def("_load_compiled_graph", [](const py::bytes& b, const std::string& label) {
    return CompiledGraph::load(std::string(b), label);
  }, py::arg("program"), py::arg("label"));
  // Work queued on any stream so far (neuronrt::queued_work_count).
  m.def("_queued_work_count", [] { return neuronrt::queued_work_count(); });
}

}  // namespace torchneuron::python
