"""Makes PyTorch's PrivateUse1 backend the `neuron` device."""
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
    from . import device_module

    torch._register_device_module(BACKEND, device_module)
    # tensor.neuron(), module.neuron(), tensor.is_neuron, storage.neuron(), ...
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
