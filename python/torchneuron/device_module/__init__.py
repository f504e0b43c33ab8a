"""`torch.neuron`: the device module of the neuron backend.

Split by topic like torch.cuda: devices here, then streams, memory, random
and amp in their own files.
"""
from . import amp
from ._amp import get_amp_supported_dtype, is_bf16_supported
from ._device import (
    _is_in_bad_fork,
    _lazy_init,
    current_device,
    device,
    device_count,
    device_of,
    get_device_capability,
    get_device_name,
    get_device_properties,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from ._memory import (
    empty_cache,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_memory_stats,
    reset_peak_memory_stats,
)
from ._random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from ._streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream



def __getattr__(name):
    # torch.utils.checkpoint (preserve_rng_state) saves and restores a device
    # module's generator states only if its `_initialized` is true (torch.cuda's
    # module global); without it a checkpointed recomputation draws other dropout
    # masks than the forward did.
    if name == "_initialized":
        from . import _device

        return _device.is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Event", "Stream", "StreamContext", "current_device", "current_stream", "default_generators",
    "default_stream", "device", "device_count", "device_of", "empty_cache",
    "amp", "get_amp_supported_dtype", "get_device_capability", "get_device_name", "get_device_properties", "get_rng_state",
    "get_rng_state_all", "init", "initial_seed", "is_available", "is_bf16_supported",
    "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved",
    "memory_snapshot", "memory_stats", "memory_summary", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats", "seed", "seed_all", "set_device", "set_rng_state",
    "set_rng_state_all", "set_stream", "stream", "synchronize",
]
