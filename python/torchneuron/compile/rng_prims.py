"""The neuron device in PyTorch's RNG-state higher-order ops.

Under `torch.compile`, an op that draws random numbers (dropout, and attention,
whose "overrideable" op takes a seed) inside activation checkpointing
(`torch.utils.checkpoint`, Transformers' `gradient_checkpointing`, SFTConfig's
default) becomes `run_and_save_rng_state` in the forward graph and
`run_with_rng_state` in the backward, so that the recomputation draws what the
first computation drew. PyTorch runs them through a fixed table of devices
(cuda, cpu, hpu, xpu) in `torch._prims.rng_prims` and fails for any other with
"Backend not supported for neuron". Their BackendSelect kernels are wrapped
here to run the neuron case as CUDA's does with `torch.neuron`'s generator
state, and to leave every other device to PyTorch. Checked against torch 2.13.0.
This is the path of graphs that run eagerly; in a compiled program the state is
a value of the program (serialize.py, csrc/compiler/RngStateOps.cpp).
"""
import torch
from torch._C import DispatchKey


def _run_and_save(op, *args, **kwargs):
    return torch.neuron.get_rng_state(), op(*args, **kwargs)


def _run_with(rng_state, op, *args, **kwargs):
    current = torch.neuron.get_rng_state()
    torch.neuron.set_rng_state(rng_state.cpu())
    try:
        return op(*args, **kwargs)
    finally:
        torch.neuron.set_rng_state(current)


def _wrap(hop, neuron_impl, device_of):
    original = hop.py_kernels[DispatchKey.BackendSelect]

    def backend_select(*args, **kwargs):
        if device_of(args, kwargs) == "neuron":
            return neuron_impl(*args, **kwargs)
        return original(*args, **kwargs)

    backend_select.__torchneuron_wraps__ = original
    hop.py_kernels[DispatchKey.BackendSelect] = backend_select
    getattr(hop, "_dispatch_cache", {}).clear()


def register(rng_prims):
    """Wraps the two ops' BackendSelect kernels (idempotent)."""
    get_device = rng_prims.get_device
    for hop, neuron_impl, device_of in (
        (rng_prims.run_and_save_rng_state, _run_and_save, lambda a, k: get_device(a[1:], k)),
        (rng_prims.run_with_rng_state, _run_with, lambda a, k: get_device(a[2:], k)),
    ):
        if not hasattr(hop.py_kernels.get(DispatchKey.BackendSelect), "__torchneuron_wraps__"):
            _wrap(hop, neuron_impl, device_of)
