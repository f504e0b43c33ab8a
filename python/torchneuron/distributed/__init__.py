"""torch.distributed's "neuron" backend (ProcessGroupNeuron, csrc/distributed/).

torchneuron registers it when it loads, so `init_process_group(backend="neuron")`,
`backend=None` with `device_id=torch.device("neuron", i)`, `"cpu:gloo,neuron:neuron"`
and `init_device_mesh("neuron", ...)` resolve to it. Registering only records the
creator; the C++ class is bound when the first group is made. See docs/distributed.md.
"""
from .registration import register

__all__ = ["register"]
