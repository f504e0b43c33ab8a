#include "csrc/python/Bindings.h"
#include "csrc/runtime/NeuronAllocator.h"

namespace py = pybind11;

namespace torchneuron::python {

void bind_memory(py::module_& m) {
  m.def("_memory_snapshot", [](int device) {
    py::list out;
    for (const auto& s : memory_snapshot(static_cast<c10::DeviceIndex>(device))) {
      py::dict d;
      d["address"] = s.address;
      d["total_size"] = s.total_size;
      d["allocated_size"] = s.allocated_size;
      d["segment_type"] = s.is_large ? "large" : "small";
      d["stream"] = s.stream_id;
      out.append(d);
    }
    return out;
  });
  m.def("_empty_cache", [] { device_allocator()->emptyCache(); });
}

}  // namespace torchneuron::python
