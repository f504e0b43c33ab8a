"""Common ground of the adaptations: is `neuron` the accelerator, and the mark of
a function already wrapped."""
import torch

PATCHED_ATTR = "__torchneuron_patched__"


def neuron_is_accelerator():
    """True when `neuron` is PyTorch's current accelerator and has a core."""
    try:
        acc = torch.accelerator.current_accelerator()
        return acc is not None and acc.type == "neuron" and torch.neuron.device_count() > 0
    except Exception:
        return False

