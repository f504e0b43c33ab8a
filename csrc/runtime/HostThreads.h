// Host threads hand the machine's cores to the device.
//
// The device's worker threads run ATen's CPU kernels, whose parallel regions
// are OpenMP teams of their own. A host thread that also keeps an OpenMP team
// puts more OpenMP threads in the process than there are cores, and libgomp
// then cuts every spin-wait short (its "throttled" spin count), so each
// parallel region on the device pays a thread wake-up: oneDNN's bfloat16
// matrix-vector products took twice as long. So the first time a host thread
// issues neuron work, its own intra-op parallelism drops to
// TORCHNEURON_HOST_THREADS (default 1) and its idle OpenMP team is released.
#pragma once

namespace torchneuron {

// Called on every launch; cheap after the first call on a thread.
void yield_host_threads_to_device();

}  // namespace torchneuron
