// torchneuron._C: what the extension sets up when it loads, and the
// bindings by topic (csrc/python/Bindings.h). Bindings only: the logic lives
// in csrc/runtime, csrc/aten and csrc/profiler.
#include "csrc/aten/Fallback.h"
#include "csrc/distributed/SharedDeviceMemory.h"
#include "csrc/python/Bindings.h"
#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/WorkerThreads.h"

namespace py = pybind11;

namespace torchneuron::python {
namespace {

// Host waits release the GIL when this thread holds it
// (csrc/runtime/BlockingWait.h): the Python side of that hook.
void wait_without_gil(const std::function<void()>& wait) {
  if (PyGILState_Check()) {
    py::gil_scoped_release no_gil;
    wait();
  } else {
    wait();
  }
}

}  // namespace
}  // namespace torchneuron::python

PYBIND11_MODULE(_C, m) {
  using namespace torchneuron;
  m.doc() = "torchneuron native extension";
  install_worker_init();
  install_shared_device_memory();
  register_structured_overrides();
  set_blocking_wait_hook(&python::wait_without_gil);

  python::bind_device(m);
  python::bind_memory(m);
  python::bind_stats(m);
  python::bind_compiler(m);
  python::bind_distributed(m);
}
