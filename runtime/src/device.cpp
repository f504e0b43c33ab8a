// Device table, properties, the per-thread current device, and fork handling.
#include "device.hpp"

#include <pthread.h>

#include <cstdio>
#include <cstring>

#include "error.hpp"
#include "testing.hpp"

namespace neuronrt::detail {
namespace {

// A fixed-size table of lazily created devices: lookups are a single atomic
// load, and entries never move or die.
std::atomic<Device*> g_devices[kMaxCores];
std::mutex g_devices_mu;

std::atomic<bool> g_threads_started{false};
// Written only by the atfork child handler, while the child is single-threaded.
std::atomic<bool> g_forked_child{false};

constexpr const char* kForkMessage =
    "the neuron runtime was started before fork(); a forked child cannot use "
    "the device. Use the 'spawn' multiprocessing start method "
    "(multiprocessing.set_start_method('spawn') or torch.multiprocessing with "
    "spawn)";

// Worker threads do not survive fork(), and locks they held stay locked in
// the child, so a child forked after they started must not touch the runtime.
void on_fork_child() {
  if (g_threads_started.load(std::memory_order_relaxed)) {
    g_forked_child.store(true, std::memory_order_relaxed);
  }
}

// Registered at load time, before any worker thread can exist.
const int g_atfork_registered = pthread_atfork(nullptr, nullptr, on_fork_child);

// -1: not set on this thread, which then starts on the configured default
// (LOCAL_RANK under torchrun, else 0).
thread_local int t_current_device = -1;

}  // namespace

void note_worker_thread_started() {
  g_threads_started.store(true, std::memory_order_relaxed);
}

bool in_forked_child() { return g_forked_child.load(std::memory_order_relaxed); }

nrtStatus api_enter() {
  (void)g_atfork_registered;
  if (in_forked_child()) [[unlikely]] {
    return set_error(nrtErrorForkedChild, kForkMessage);
  }
  const Config& c = config();
  if (!c.ok) [[unlikely]] return set_error(nrtErrorInvalidConfiguration, c.error);
  return nrtSuccess;
}

nrtStatus check_device(int device) {
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  const int count = config().core_count();
  if (device < 0 || device >= count) [[unlikely]] {
    return set_errorf(nrtErrorInvalidDevice,
                      "invalid device index %d: %d neuron device%s visible "
                      "(valid indices 0..%d; see NEURON_RT_VISIBLE_CORES / "
                      "NEURON_RT_NUM_CORES)",
                      device, count, count == 1 ? " is" : "s are", count - 1);
  }
  return nrtSuccess;
}

Device* device_if_created(int device) {
  return g_devices[device].load(std::memory_order_acquire);
}

Device& device_at(int device) {
  Device* d = g_devices[device].load(std::memory_order_acquire);
  if (d != nullptr) [[likely]] return *d;
  std::lock_guard<std::mutex> lock(g_devices_mu);
  d = g_devices[device].load(std::memory_order_acquire);
  if (d == nullptr) {
    d = new Device(device);
    g_devices[device].store(d, std::memory_order_release);
  }
  return *d;
}

}  // namespace neuronrt::detail

namespace neuronrt::testing {
bool worker_threads_started() {
  return neuronrt::detail::g_threads_started.load(std::memory_order_relaxed);
}
}  // namespace neuronrt::testing

using namespace neuronrt::detail;

extern "C" {

nrtStatus nrtGetDeviceCount(int* count) {
  if (count == nullptr) return set_error(nrtErrorInvalidValue, "nrtGetDeviceCount: count is null");
  *count = 0;
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  *count = config().core_count();
  return nrtSuccess;
}

nrtStatus nrtGetDeviceProperties(nrtDeviceProp* prop, int device) {
  if (prop == nullptr) {
    return set_error(nrtErrorInvalidValue, "nrtGetDeviceProperties: prop is null");
  }
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  const Config& c = config();
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "%s", "NeuronCore-v3 (software)");
  prop->totalMemory = c.capacity;
  prop->requestedMemory = c.requested_memory;
  prop->memoryCapped = c.capped ? 1 : 0;
  prop->coreCount = c.core_count();
  prop->physicalIndex = c.physical_cores[static_cast<size_t>(device)];
  return nrtSuccess;
}

nrtStatus nrtSetDevice(int device) {
  if (nrtStatus st = check_device(device); st != nrtSuccess) return st;
  t_current_device = device;
  return nrtSuccess;
}

nrtStatus nrtGetDevice(int* device) {
  if (device == nullptr) return set_error(nrtErrorInvalidValue, "nrtGetDevice: device is null");
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  *device = t_current_device >= 0 ? t_current_device : config().default_device;
  return nrtSuccess;
}

}  // extern "C"
