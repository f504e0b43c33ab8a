#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "csrc/distributed/ProcessGroupNeuron.h"
#include "csrc/python/Bindings.h"

namespace py = pybind11;

namespace torchneuron::python {
namespace {

void define_process_group(py::module_& m) {
  py::module_ sub = m.def_submodule("_distributed", "torch.distributed's neuron backend");
  py::class_<HostTopology>(sub, "HostTopology")
      .def_static("exchange", &HostTopology::exchange, py::arg("store"), py::arg("rank"),
                  py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>())
      .def_readonly("hosts", &HostTopology::hosts)
      .def_readonly("generation", &HostTopology::generation)
      .def_property_readonly("host", &HostTopology::host)
      .def_property_readonly("is_leader", &HostTopology::is_leader);
  sub.def("host_identity", &host_identity);
  using Gloo = std::optional<c10::intrusive_ptr<c10d::Backend>>;
  py::class_<ProcessGroupNeuron, c10d::Backend, c10::intrusive_ptr<ProcessGroupNeuron>>(
      sub, "ProcessGroupNeuron")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::milliseconds timeout, const std::string& group_name,
                       HostTopology topology, Gloo all, Gloo control, Gloo leaders) {
             InterHostGroups groups{all.value_or(nullptr), control.value_or(nullptr),
                                    leaders.value_or(nullptr)};
             return c10::make_intrusive<ProcessGroupNeuron>(store, rank, size, timeout, group_name,
                                                            std::move(topology), std::move(groups));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("group_name"), py::arg("topology"), py::arg("gloo_all") = py::none(),
           py::arg("gloo_control") = py::none(), py::arg("gloo_leaders") = py::none(),
           py::call_guard<py::gil_scoped_release>())
      .def("_hosts", [](const ProcessGroupNeuron& pg) { return pg.topology().hosts; })
      .def("_stats", [](const ProcessGroupNeuron& pg) {
        const neuroncoll::GroupStats s = pg.stats();
        py::dict d;
        d["collectives"] = s.collectives;
        d["small_all_reduces"] = s.small_all_reduces;
        d["chunked_all_reduces"] = s.chunked_all_reduces;
        d["direct_all_reduces"] = s.direct_all_reduces;
        d["direct_broadcasts"] = s.direct_broadcasts;
        d["direct_all_gathers"] = s.direct_all_gathers;
        d["direct_reduce_scatters"] = s.direct_reduce_scatters;
        d["inline_collectives"] = pg.inline_runs();
        return d;
      });
}

}  // namespace

void bind_distributed(py::module_& m) {
  // c10d's Python types (Backend, Store) exist once torch.distributed has
  // been imported, so the class is defined on first request, not at load.
  m.def("_init_distributed", [m]() mutable {
    if (!py::hasattr(m, "_distributed")) define_process_group(m);
    return m.attr("_distributed");
  });
}

}  // namespace torchneuron::python
