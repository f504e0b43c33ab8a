"""`torch.neuron.amp`: the spellings of `torch.cuda.amp` for the neuron device,
so scripts written for CUDA (`torch.cuda.amp.autocast()`, `GradScaler()`) port
by renaming the device. Both are PyTorch's own device-generic classes with the
device fixed to neuron; unlike `torch.cuda.amp`, they are not deprecated here
(they are the device module's natural spelling, as TorchNeuron users expect).
"""
import torch


class autocast(torch.amp.autocast_mode.autocast):
    """`torch.autocast("neuron", ...)`; dtype defaults to the device's autocast dtype
    (`torch.get_autocast_dtype("neuron")`, bfloat16 unless set)."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype | None = None,
                 cache_enabled: bool = True):
        super().__init__("neuron", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("neuron", ...)`."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        super().__init__("neuron", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


__all__ = ["GradScaler", "autocast"]
