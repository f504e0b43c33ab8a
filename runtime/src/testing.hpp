// Hooks for the runtime's own tests; not part of the public API.
#pragma once

namespace neuronrt::testing {

// Re-reads the environment (topology, capacity, NEURON_LAUNCH_BLOCKING) as
// if the process had just started. Devices, streams and memory that already
// exist are kept; only call it while the runtime is idle.
void reload_config();

// True once any stream worker thread has been started in this process.
bool worker_threads_started();

}  // namespace neuronrt::testing
