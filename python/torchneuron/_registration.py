"""Makes PyTorch's PrivateUse1 backend the `neuron` device."""
import atexit
import sys
import time

import torch

BACKEND = "neuron"


def register():
    current = torch._C._get_privateuse1_backend_name()
    if current == BACKEND and hasattr(torch, BACKEND):
        return  # already registered in this process
    if current != "privateuseone":
        raise RuntimeError(
            f"PyTorch's PrivateUse1 backend is already registered as '{current}'; "
            "torchneuron needs it for 'neuron' and PyTorch allows one such backend per process."
        )
    torch.utils.rename_privateuse1_backend(BACKEND)
    atexit.register(_let_backward_threads_finish)
    from . import device_module

    torch._register_device_module(BACKEND, device_module)
    # `import torch.neuron.amp` as for torch.cuda.amp (submodules of a registered
    # device module are attributes only).
    sys.modules[f"torch.{BACKEND}.amp"] = device_module.amp
    # tensor.neuron(), module.neuron(), tensor.is_neuron, storage.neuron(), ...
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )


def _let_backward_threads_finish():
    # PyTorch's autograd engine runs backward on a thread per device, which
    # drops its last reference to the graph task (holding Python objects)
    # just after backward() has returned. A script that ends right there can
    # reach interpreter shutdown first; that thread then cannot take the GIL
    # and the process aborts ("terminate called without an active
    # exception", 8 exits in 12). Releasing the GIL briefly at exit, in
    # processes that used the device, lets it finish first.
    from ._ops import executed_ops

    if executed_ops():
        time.sleep(0.02)
