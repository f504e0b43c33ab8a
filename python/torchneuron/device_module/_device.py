"""Devices: count, selection, properties, synchronization."""
from dataclasses import dataclass

import torch

from .. import _C

_initialized = False


def _index(device=None, optional=True) -> int:
    """Device index from None (current), an int, "neuron:1" or torch.device."""
    if device is None:
        return _C._get_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"[neuron] expected a neuron device, got '{device}'")
        return _C._get_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"[neuron] expected a device index, name or torch.device, got {device!r}")


def _checked_index(device=None, op: str = "") -> int:
    """Like _index, but the index must name a visible core.

    `op` names the calling function in the error message.
    """
    where = f"[neuron] {op}: " if op else "[neuron] "
    count = _C._device_count()
    if count == 0:
        # No core at all: say why (usually an invalid NEURON_RT_* variable).
        raise RuntimeError(f"{where}no neuron device is available: "
                           f"{_C._device_count_error() or 'the runtime reports 0 cores'}")
    index = _index(device)
    if not 0 <= index < count:
        # A RuntimeError, as CUDA raises: code written for CUDA catches that.
        raise RuntimeError(
            f"{where}device index {index} is out of range; this process has {count} neuron "
            f"core(s) (neuron:0 to neuron:{count - 1}). Set NEURON_RT_NUM_CORES or "
            f"NEURON_RT_VISIBLE_CORES for more."
        )
    return index


def is_available() -> bool:
    return _C._device_count() > 0


def device_count() -> int:
    return _C._device_count()


def init():
    """Initializes the device (idempotent; it also happens on first use)."""
    global _initialized
    if _C._device_count() == 0:
        raise RuntimeError(f"[neuron] no neuron device is available: {_C._device_count_error()}")
    _C._check_not_forked()
    _initialized = True


def _lazy_init():
    """Called by torch before the first neuron tensor of the process is made (as
    torch.cuda._lazy_init is), so that is_initialized() reports the use. Without
    a device the tensor's own creation raises the clear error, so nothing here."""
    global _initialized
    if _C._device_count() > 0:
        _initialized = True


def is_initialized() -> bool:
    # Like torch.cuda: a child forked after the device started work cannot use it.
    return _initialized and not _C._is_in_bad_fork()


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def current_device() -> int:
    if torch.compiler.is_compiling():
        # Dynamo folds torch.accelerator's query into a constant guarded on its
        # value (as it does torch.cuda.current_device): a compiled function that
        # reads the current device neither breaks its graph nor keeps a stale
        # index after set_device. Eagerly, the direct query: torch.accelerator's
        # would initialize the device, and a query must not.
        return torch.accelerator.current_device_index()
    return _C._get_device()


def set_device(device) -> None:
    _C._set_device(_checked_index(device, "set_device"))


class device:
    """Context manager that changes the current neuron device."""

    def __init__(self, device):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _C._get_device()
            if self.idx != self.prev_idx:
                _C._set_device(_checked_index(self.idx, "device"))

    def __exit__(self, *exc):
        if self.prev_idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of a tensor current."""

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    total_memory: int
    requested_memory: int
    memory_capped: bool
    core_count: int
    physical_index: int

    def __repr__(self):
        return (
            f"NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
            f"core_count={self.core_count}, memory_capped={self.memory_capped})"
        )


def get_device_properties(device=None) -> NeuronDeviceProperties:
    return NeuronDeviceProperties(
        **_C._get_device_properties(_checked_index(device, "get_device_properties")))


def get_device_capability(device=None) -> dict:
    """What the core supports, as torch.accelerator.get_device_capability reports it:
    {"supported_dtypes": set of torch.dtype}. (torch.cuda's returns a compute
    capability pair; a NeuronCore has no such version.)"""
    return torch._C._accelerator_getDeviceCapability(
        _checked_index(device, "get_device_capability"))


def get_device_name(device=None) -> str:
    return _C._get_device_properties(_checked_index(device, "get_device_name"))["name"]


def synchronize(device=None) -> None:
    """Waits for all work queued on the device; raises the first error it met."""
    _C._synchronize(_checked_index(device, "synchronize"))
