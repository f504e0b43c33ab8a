// Device memory that the other processes of the host can map: under torchrun
// with several local ranks, raw device memory comes from a neuroncoll
// SharedArena (runtime's nrtSetMemorySource), so that large all_reduce,
// broadcast and all_gather read peers' buffers directly instead of copying
// them through staging memory. The arena is a memfd as large as this
// process's device capacity (pages exist only once touched, and return to
// the system when large blocks are freed); when it cannot be made, or is
// full, device memory is ordinary host memory as without torchrun.
// On by default only where the kernel backs shared memory with huge pages
// (else compute kernels slow down on its 4 KiB pages);
// TORCHNEURON_DIST_SHARED_MEMORY=1 turns it on anyway, =0 off.
#pragma once

namespace torchneuron {

// Called when the extension loads, before any device allocation. Never throws.
void install_shared_device_memory();

}  // namespace torchneuron
