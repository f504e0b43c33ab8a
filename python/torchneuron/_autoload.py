"""Entry point of the `torch.backends` group: `import torch` calls load().

It must never make `import torch` fail: problems become a warning here, and
errors only when the device is used.
"""
import sys


def load():
    if "torchneuron" in sys.modules:
        # torchneuron itself is importing torch; its __init__ registers the
        # device once torch is ready.
        return
    try:
        import torchneuron  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the environment
        import warnings

        warnings.warn(f"torchneuron could not be loaded, the 'neuron' device is unavailable: {e}")
