"""torch.compile(backend="neuron"): the Dynamo front end of the neuron device (docs/compile.md).

One concept per file: backend.py (the backend function), options.py (modes
and options), decompositions.py (what AOTAutograd keeps whole), executor.py
(the seam where the graph compiler plugs in), device_interface.py (Dynamo's
view of the device), metrics.py (compile_metrics()), debug.py
(TORCHNEURON_DEBUG_DIR), default_backend.py (what torch.compile(model) picks
on neuron tensors).

Importing this package stays light: Dynamo is imported by backend.py and
device_interface.py only, which torch.compile loads through the
`torch_dynamo_backends` entry point (or the default-backend hook) when it
compiles.
"""


def compile_metrics():
    """One record per compilation of the neuron backend in this process (docs/compile.md)."""
    from .metrics import compile_metrics as records

    return records()


def reset_compile_metrics():
    from .metrics import reset_compile_metrics as reset

    reset()
