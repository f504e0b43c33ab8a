#include <torch/csrc/Generator.h>

#include "csrc/aten/native/OneDnnGemm.h"
#include "csrc/python/Bindings.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronGenerator.h"

namespace py = pybind11;

namespace torchneuron::python {

void bind_device(py::module_& m) {
  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_device_count_error", &device_unavailable_reason);
  m.def("_kernel_isa", &kernel_isa_name);
  m.def("_supported_kernel_isas", &supported_kernel_isa_names);
  m.def("_float32_gemm_library", [] { return std::string(native::float32_gemm_library()); });
  m.def("_get_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int d) { set_device(static_cast<c10::DeviceIndex>(d)); });
  m.def("_get_device_properties", [](int device) {
    const nrtDeviceProp p = device_properties(static_cast<c10::DeviceIndex>(device));
    py::dict d;
    d["name"] = std::string(p.name);
    d["total_memory"] = p.totalMemory;
    d["requested_memory"] = p.requestedMemory;
    d["memory_capped"] = p.memoryCapped != 0;
    d["core_count"] = p.coreCount;
    d["physical_index"] = p.physicalIndex;
    return d;
  });
  m.def("_synchronize", [](int device) { synchronize_device(static_cast<c10::DeviceIndex>(device)); },
        py::arg("device") = -1);
  m.def("_launch_blocking", &launch_blocking);
  m.def("_is_in_bad_fork", &in_bad_fork);
  m.def("_check_not_forked", &check_not_forked);
  m.def("_default_generator", [](int device) {
    const at::Generator& g = default_generator(static_cast<c10::DeviceIndex>(device));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(g));
  });
}

}  // namespace torchneuron::python
