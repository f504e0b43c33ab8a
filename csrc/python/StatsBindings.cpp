#include "csrc/aten/OpStats.h"
#include "csrc/python/Bindings.h"
#include "neuronrt/neuronrt.hpp"

namespace py = pybind11;

namespace torchneuron::python {

void bind_stats(py::module_& m) {
  // {op name: {path name: count}}, paths in ExecPath order, zero counts left out.
  m.def("_executed_ops", [] {
    py::dict out;
    for (const auto& [name, counts] : op_counts()) {
      py::dict per_path;
      for (int p = 0; p < kNumExecPaths; ++p) {
        if (counts[p]) per_path[exec_path_name(static_cast<ExecPath>(p))] = counts[p];
      }
      out[py::str(name)] = per_path;
    }
    return out;
  });
  m.def("_reset_executed_ops", &reset_op_counts);
  // Task records the runtime keeps for the profiler (0 whenever no profiling
  // session is collecting).
  m.def("_profiler_record_count", [] { return neuronrt::profiling_record_count(); });
}

}  // namespace torchneuron::python
