"""torchneuron: a native PyTorch backend for Neuron-style accelerators.

Importing it (or just `import torch`, through autoload) registers the `neuron`
device: PyTorch's PrivateUse1 backend renamed, with the software NeuronCore
runtime underneath. See README.md and docs/.
"""
import importlib.util as _importlib_util

import torch

if _importlib_util.find_spec("torch_neuronx") is not None:
    raise ImportError(
        "torchneuron cannot be used in the same environment as AWS's torch_neuronx: both "
        "register PyTorch's single PrivateUse1 backend. Use a separate virtual environment."
    )

from . import _C  # noqa: E402  (the native extension: registrations happen on load)
from ._registration import register as _register  # noqa: E402

_register()

from ._ops import executed_ops, fallback_ops, reset_executed_ops  # noqa: E402
from ._isa import float32_gemm_library, kernel_isa, supported_kernel_isas  # noqa: E402
from . import hf_integration as _hf_integration  # noqa: E402,F401  (device_map="auto" & co.)
from .compile import compile_metrics, reset_compile_metrics  # noqa: E402  (light: no Dynamo import)
from .compile.registration import install as _install_compile_hooks  # noqa: E402

_install_compile_hooks()  # torch.compile(model) on neuron tensors picks backend="neuron"

from .distributed import register as _register_distributed  # noqa: E402

_register_distributed()  # init_process_group(backend="neuron"), devices=["neuron"]

__all__ = ["compile_metrics", "executed_ops", "fallback_ops", "float32_gemm_library", "kernel_isa", "reset_compile_metrics",
           "reset_executed_ops", "supported_kernel_isas"]
__version__ = "0.1.0"
