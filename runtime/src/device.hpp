// The device table, the common entry check of every API call, and fork state.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "config.hpp"
#include "neuronrt/neuronrt.h"

namespace neuronrt::detail {

// One logical NeuronCore. Created on first use and intentionally never
// destroyed: tensors may be freed from static destructors at process exit.
struct Device {
  explicit Device(int index) : index(index) {}
  const int index;
  std::mutex mu;                              // guards streams, next_stream_id
  std::atomic<nrtStream_t> default_stream{nullptr};
  std::vector<nrtStream_t> streams;           // live streams, default included
  int64_t next_stream_id = 1;
  std::atomic<size_t> used_bytes{0};          // raw allocations (nrtMalloc)
};

// Checks that the runtime is usable from this process (not a forked child,
// configuration valid). Every C entry point starts with it.
nrtStatus api_enter();

// api_enter() plus a device index range check.
nrtStatus check_device(int device);

// The device with a valid index (see check_device), created on first use.
Device& device_at(int device);

// Calls fn on every device created so far.
template <class Fn>
void for_each_device(Fn&& fn);

// Worker-thread bookkeeping for fork detection.
void note_worker_thread_started();
bool in_forked_child();

// Implementation detail of for_each_device.
Device* device_if_created(int device);

template <class Fn>
void for_each_device(Fn&& fn) {
  for (int i = 0; i < kMaxCores; ++i) {
    if (Device* d = device_if_created(i)) fn(*d);
  }
}

}  // namespace neuronrt::detail
