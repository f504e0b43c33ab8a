"""Common ground of the adaptations: is `neuron` the accelerator, the mark of
a function already wrapped, and finding the classes an adaptation wraps."""
import warnings

import torch

PATCHED_ATTR = "__torchneuron_patched__"


def neuron_is_accelerator():
    """True when `neuron` is PyTorch's current accelerator and has a core."""
    try:
        acc = torch.accelerator.current_accelerator()
        return acc is not None and acc.type == "neuron" and torch.neuron.device_count() > 0
    except Exception:
        return False


def classes_to_adapt(module, names, consequence, members=()):
    """The classes `names` of `module`, to adapt now, or None: with a warning when
    one is missing or the first does not define each of `members` itself (this
    version changed what the adaptation wraps; `consequence` says what users
    lose), silently when the first is adapted already."""
    classes = [getattr(module, name, None) for name in names]
    if any(c is None for c in classes) or any(m not in vars(classes[0]) for m in members):
        what = " or ".join(names) if not members else f"{names[0]}.{'/'.join(members)}"
        warnings.warn(f"torchneuron: {module.__name__}.{what} not found; {consequence} with this version.",
                      stacklevel=3)
        return None
    if vars(classes[0]).get(PATCHED_ATTR, False):
        return None
    return classes
