// Python bindings of torchneuron._C. Bindings only: the logic lives in
// csrc/runtime and csrc/aten.
#include <ATen/Parallel.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/OpStats.h"
#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronGenerator.h"
#include "neuronkernels/isa.hpp"
#include "neuronrt/neuronrt.hpp"

namespace py = pybind11;

namespace torchneuron {
namespace {

// Worker threads run ATen CPU kernels: give them ATen's intra-op settings.
void init_worker(int /*device*/) { at::init_num_threads(); }

py::dict device_properties(int device) {
  check_device_index(static_cast<c10::DeviceIndex>(device), "get_device_properties");
  nrtDeviceProp p{};
  NEURON_CHECK(nrtGetDeviceProperties(&p, device));
  py::dict d;
  d["name"] = std::string(p.name);
  d["total_memory"] = p.totalMemory;
  d["requested_memory"] = p.requestedMemory;
  d["memory_capped"] = p.memoryCapped != 0;
  d["core_count"] = p.coreCount;
  d["physical_index"] = p.physicalIndex;
  return d;
}

void synchronize(int device) {
  auto d = device < 0 ? current_device() : static_cast<c10::DeviceIndex>(device);
  check_device_index(d, "synchronize");
  py::gil_scoped_release no_gil;
  NEURON_TRY { neuronrt::synchronize_device(d); }
  NEURON_CATCH
}

py::dict executed_ops() {
  py::dict out;
  for (const auto& [name, counts] : op_counts()) {
    py::dict per_path;
    for (int p = 0; p < kNumExecPaths; ++p) {
      if (counts[p]) per_path[exec_path_name(static_cast<ExecPath>(p))] = counts[p];
    }
    out[py::str(name)] = per_path;
  }
  return out;
}

py::list memory_snapshot(int device) {
  check_device_index(static_cast<c10::DeviceIndex>(device), "memory_snapshot");
  py::list out;
  for (const auto& s : neuronrt::CachingAllocator::get().snapshot(device)) {
    py::dict d;
    d["address"] = s.address;
    d["total_size"] = s.total_size;
    d["allocated_size"] = s.allocated_size;
    d["segment_type"] = s.is_large ? "large" : "small";
    d["stream"] = s.stream_id;
    out.append(d);
  }
  return out;
}

// Blocking waits release the GIL when this thread holds it (see Launch.h).
void wait_without_gil(const std::function<void()>& wait) {
  if (PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    wait();
  } else {
    wait();
  }
}

bool in_bad_fork() {
  int d = 0;
  return nrtGetDevice(&d) == nrtErrorForkedChild;
}

// torch.neuron.init() in a child forked after the parent used the device
// raises the runtime's fork error, as torch.cuda.init() does.
void check_not_forked() {
  int d = 0;
  nrtStatus status = nrtGetDevice(&d);
  if (status == nrtErrorForkedChild) throw_status(status, std::string());
}

}  // namespace
}  // namespace torchneuron

PYBIND11_MODULE(_C, m) {
  using namespace torchneuron;
  m.doc() = "torchneuron native extension";
  neuronrt::set_worker_init(&init_worker);
  register_structured_overrides();
  set_blocking_wait_hook(&wait_without_gil);

  m.def("_device_count", [] { return static_cast<int>(device_count()); });
  m.def("_device_count_error", &device_unavailable_reason);
  m.def("_kernel_isa", [] {
    const std::string& why = neuronkernels::isa_error();
    return why.empty() ? std::string(neuronkernels::isa_name(neuronkernels::isa())) : std::string();
  });
  m.def("_supported_kernel_isas", [] {
    std::vector<std::string> out;
    for (auto level : neuronkernels::supported_isas()) out.emplace_back(neuronkernels::isa_name(level));
    return out;
  });
  m.def("_get_device", [] { return static_cast<int>(current_device()); });
  m.def("_set_device", [](int d) { set_device(static_cast<c10::DeviceIndex>(d)); });
  m.def("_get_device_properties", &device_properties);
  m.def("_synchronize", &synchronize, py::arg("device") = -1);
  m.def("_launch_blocking", &neuronrt::launch_blocking);
  m.def("_is_in_bad_fork", &in_bad_fork);
  m.def("_check_not_forked", &check_not_forked);
  m.def("_executed_ops", &executed_ops);
  // Task records the runtime keeps for the profiler (0 whenever no profiling
  // session is collecting).
  m.def("_profiler_record_count", [] { return neuronrt::profiling_record_count(); });
  m.def("_reset_executed_ops", &reset_op_counts);
  m.def("_memory_snapshot", &memory_snapshot);
  m.def("_empty_cache", [] {
    NEURON_TRY { neuronrt::CachingAllocator::get().empty_cache(-1); }
    NEURON_CATCH
  });
  m.def("_default_generator", [](int device) {
    const at::Generator& g = default_generator(static_cast<c10::DeviceIndex>(device));
    return py::reinterpret_steal<py::object>(THPGenerator_initDefaultGenerator(g));
  });
}
