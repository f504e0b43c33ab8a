// Process configuration from the environment: topology, capacity, blocking.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace neuronrt::detail {

constexpr int kMaxCores = 256;
constexpr size_t kDefaultDeviceMemory = size_t{24} << 30;  // 24 GiB
constexpr size_t kCapacityGranule = size_t{2} << 20;       // 2 MiB

struct Config {
  bool ok = true;
  std::string error;                 // why !ok: names variable, value, accepted forms
  std::vector<int> physical_cores;   // visible core ids; size() is the device count
  size_t requested_memory = kDefaultDeviceMemory;
  size_t capacity = kDefaultDeviceMemory;  // per core, after the host-memory cap
  bool capped = false;
  bool launch_blocking = false;
  int kernel_threads = 0;            // threads of the device's own kernels; 0 = one per usable CPU
  // Under torchrun: processes of this host (LOCAL_WORLD_SIZE) and the device
  // each thread starts on (LOCAL_RANK, when it is a visible core).
  int local_processes = 1;
  int default_device = 0;
  int core_count() const { return static_cast<int>(physical_cores.size()); }
};

// The process configuration, read from the environment on first use
// (thread-safe) and kept for the life of the process.
const Config& config();

// Pure pieces, exposed for tests. Each returns false and fills *why on error.
bool parse_visible_cores(const std::string& text, std::vector<int>* cores,
                         std::string* why);
bool parse_core_count(const std::string& text, int* count);
bool parse_memory_size(const std::string& text, size_t* bytes);
// MemAvailable from /proc/meminfo in bytes, 0 if unknown.
size_t read_mem_available();
// Per-core capacity: requested, capped to 90% of available host memory split
// across the cores and rounded down to 2 MiB. mem_available 0 means no cap.
size_t capped_capacity(size_t requested, size_t mem_available, int cores);

// Builds a configuration from raw variable values (nullptr = unset).
// `local_world_size` and `local_rank` are torchrun's LOCAL_WORLD_SIZE and
// LOCAL_RANK: without NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES the
// process sees max(2, LOCAL_WORLD_SIZE) cores, its threads start on core
// LOCAL_RANK, and the memory cap is shared by every core of every local
// process. Values that are not whole numbers in range are ignored (they are
// torchrun's, not ours).
Config make_config(const char* visible_cores, const char* num_cores,
                   const char* device_memory, const char* launch_blocking,
                   size_t mem_available, const char* kernel_threads = nullptr,
                   const char* local_world_size = nullptr, const char* local_rank = nullptr);

}  // namespace neuronrt::detail
