"""What `torch.compile(model)` (no `backend=`) does on neuron tensors.

PyTorch's default backend is Inductor, which has no code generator for this
device (`InductorError: KeyError: 'neuron'` at `get_device_op_overrides`).
torch 2.13 has no per-device default backend, but it has a process-wide one
(`torch.compiler.set_default_backend`, read by `torch.compile` whenever
`backend` is not given). We set it to `inductor_or_neuron`, which looks at
each captured graph: a graph with a neuron tensor (an input, a parameter or
any intermediate value) goes to the neuron backend, every other graph to
Inductor exactly as `backend="inductor"` would (same mode and options).
A default someone else has set is left alone.

registration.py sets it when Dynamo is first imported.
"""
import warnings


def inductor_or_neuron(gm, example_inputs, mode=None, options=None):
    """torch.compile's default backend while torchneuron is loaded (see the module doc)."""
    import torch

    from .backend import neuron, uses_neuron

    if uses_neuron(gm, example_inputs):
        from .options import OPTION_KEYS

        ours = {k: v for k, v in (options or {}).items() if k in OPTION_KEYS}
        ignored = sorted(k for k in (options or {}) if k not in OPTION_KEYS)
        if ignored:
            warnings.warn(f"[neuron] torch.compile: this graph runs on neuron with backend='neuron'; the "
                          f"Inductor options {ignored} do not apply to it", stacklevel=2)
        return neuron(gm, example_inputs, mode=mode, options=ours)
    return torch._TorchCompileInductorWrapper(mode, options, None)(gm, example_inputs)


def _reset():
    import torch

    torch._TorchCompileInductorWrapper(None, None, None).reset()


inductor_or_neuron.reset = _reset
