#include "csrc/runtime/NeuronFunctions.h"

#include <algorithm>

#include <c10/util/Exception.h>

#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronException.h"
#include "neuronkernels/isa.hpp"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron {

c10::DeviceIndex device_count() noexcept {
  // The topology is fixed for the life of the process: read it once.
  static const c10::DeviceIndex count = [] {
    // A TORCHNEURON_ISA the kernels cannot honour makes the device unusable,
    // like an invalid runtime configuration (device_unavailable_reason says why).
    if (!neuronkernels::isa_error().empty()) return c10::DeviceIndex(0);
    int n = 0;
    if (nrtGetDeviceCount(&n) != nrtSuccess) return c10::DeviceIndex(0);
    // Per-device tables in this layer hold 64 entries.
    return static_cast<c10::DeviceIndex>(std::min(n, 64));
  }();
  return count;
}

void check_device_index(c10::DeviceIndex device, const char* op) {
  auto n = device_count();
  if (C10_UNLIKELY(device < 0 || device >= n)) {
    if (n == 0) {
      TORCH_CHECK(false, "[neuron] ", op, ": no neuron device is available: ",
                  device_unavailable_reason());
    }
    // A RuntimeError, as CUDA raises: code written for CUDA catches that.
    TORCH_CHECK(false, "[neuron] ", op, ": device index ", static_cast<int>(device),
                " is out of range; this process has ", static_cast<int>(n),
                " neuron core(s) (neuron:0 to neuron:", n - 1,
                "). Set NEURON_RT_NUM_CORES or NEURON_RT_VISIBLE_CORES for more.");
  }
}

std::string device_unavailable_reason() {
  int n = 0;
  if (nrtGetDeviceCount(&n) != nrtSuccess) return nrtGetLastErrorMessage();
  return neuronkernels::isa_error();
}

c10::DeviceIndex current_device() {
  int d = 0;
  NEURON_CHECK(nrtGetDevice(&d));
  return static_cast<c10::DeviceIndex>(d);
}

void set_device(c10::DeviceIndex device) {
  check_device_index(device, "set_device");
  NEURON_CHECK(nrtSetDevice(device));
}

nrtDeviceProp device_properties(c10::DeviceIndex device) {
  check_device_index(device, "get_device_properties");
  nrtDeviceProp p{};
  NEURON_CHECK(nrtGetDeviceProperties(&p, device));
  return p;
}

void synchronize_device(c10::DeviceIndex device) {
  const c10::DeviceIndex d = device < 0 ? current_device() : device;
  check_device_index(d, "synchronize");
  NEURON_TRY {
    blocking_wait([d] { neuronrt::synchronize_device(d); });
  }
  NEURON_CATCH
}

bool launch_blocking() { return neuronrt::launch_blocking(); }

bool in_bad_fork() {
  int d = 0;
  return nrtGetDevice(&d) == nrtErrorForkedChild;
}

void check_not_forked() {
  int d = 0;
  nrtStatus status = nrtGetDevice(&d);
  if (status == nrtErrorForkedChild) throw_status(status, std::string());
}

std::string kernel_isa_name() {
  if (!neuronkernels::isa_error().empty()) return std::string();
  return neuronkernels::isa_name(neuronkernels::isa());
}

std::vector<std::string> supported_kernel_isa_names() {
  std::vector<std::string> out;
  for (auto level : neuronkernels::supported_isas()) out.emplace_back(neuronkernels::isa_name(level));
  return out;
}

}  // namespace torchneuron
