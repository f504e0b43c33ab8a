// The bindings of torchneuron._C, one function per topic (one file each).
// Bindings only convert types and forward: the logic lives in csrc/runtime,
// csrc/aten, csrc/profiler and
// csrc/distributed.
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace torchneuron::python {

// Devices: count, current device, properties, synchronization, fork state,
// generators, the kernels' instruction-set levels (DeviceBindings.cpp).
void bind_device(pybind11::module_& m);
// Device memory: snapshot, cache (MemoryBindings.cpp).
void bind_memory(pybind11::module_& m);
// What ran: per-op counts by execution path, profiler records
// (StatsBindings.cpp).
void bind_stats(pybind11::module_& m);
// Graph compilation for torch.compile: compile a serialized graph, run the
// program, the queued-work counter (CompilerBindings.cpp).
void bind_compiler(pybind11::module_& m);
// torch.distributed's backend: `_init_distributed()` defines
// `_distributed.ProcessGroupNeuron` (DistributedBindings.cpp).
void bind_distributed(pybind11::module_& m);

}  // namespace torchneuron::python
