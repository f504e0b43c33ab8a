"""How Dynamo learns about the neuron backend, without torchneuron importing Dynamo.

Each thing below is applied right after the Dynamo module it concerns has
executed (the first `torch.compile` of the process imports them), or at once if
Dynamo is already loaded:

1. `torch._dynamo.backends.registry`: the default backend becomes
   `default_backend.inductor_or_neuron` (unless someone set another), and the
   name "neuron" is registered if no installed package metadata declares the
   `torch_dynamo_backends` entry point (a source tree on PYTHONPATH, an
   editable install made before the entry point existed). With the metadata
   (`pip install -e .`), Dynamo loads the entry point itself, also when
   torchneuron is not autoloaded (`TORCH_DEVICE_BACKEND_AUTOLOAD=0`).
2. `torch._dynamo.device_interface`: the `DeviceInterface` of `neuron`
   (device_interface.py), which Dynamo asks while tracing streams, events and
   devices, before any backend is called.
3. `torch._inductor.codegen.common`: Inductor's registration for `neuron`,
   which refuses clearly (inductor.py) instead of failing with a KeyError
   when `backend="inductor"` is named explicitly on neuron tensors.
4. `torch._dynamo.decorators`: the torch.neuron functions whose result is
   fixed for the life of the process (device count, availability, bfloat16
   support, name) become `assume_constant_result`: Dynamo would otherwise
   break the graph at the pybind call inside them, as it cannot trace it.
   (torch.neuron.current_device() reads torch.accelerator, which Dynamo
   folds with a guard.) The RNG state functions are `skip`ped, as Dynamo
   skips torch.cuda's: a compiled function that calls them breaks its graph
   there and runs them eagerly; traced, their pybind calls would break the
   graph inside them and Dynamo would trace the rest of them as resume
   functions (under PyTorch's `freeze_rng_state`, in `no_dispatch`, that fails).
5. `torch.compiler._cache`: the "neuron_program" artifact type (cache.py), so
   that `torch.compiler.save_cache_artifacts()` carries the program cache's
   entries and `load_cache_artifacts()` writes them into this process's cache.
6. `torch._prims.rng_prims`: `run_and_save_rng_state` / `run_with_rng_state`,
   which compiled activation checkpointing uses around random ops, run on
   neuron (rng_prims.py); PyTorch's table of devices refuses any other.

Dynamo takes ~2 s to import and `import torch` autoloads torchneuron, so this
waits: a `sys.meta_path` finder runs the original loader of those modules and
calls the hook after it. The finder costs one dict lookup per import.
"""
import sys
import warnings

from .._import_hooks import spec_running_after

BACKEND_NAME = "neuron"
ENTRY_POINT = "torchneuron.compile.backend:neuron"


def _entry_point_installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == ENTRY_POINT for ep in entry_points(group="torch_dynamo_backends", name=BACKEND_NAME))


def neuron(gm, example_inputs, **kwargs):
    """backend="neuron" without the entry point's metadata (see the module doc)."""
    from .backend import neuron as backend

    return backend(gm, example_inputs, **kwargs)


def _registry_loaded(registry):
    from .default_backend import inductor_or_neuron

    if registry.get_default_backend() == "inductor":
        registry.set_default_backend(inductor_or_neuron)
    if not _entry_point_installed():
        registry.register_backend(compiler_fn=neuron, name=BACKEND_NAME)


def _device_interface_loaded(module):
    from .device_interface import register

    register()


def _inductor_codegen_loaded(common):
    from .inductor import register

    register(common)


def _decorators_loaded(decorators):
    from ..device_module import _amp, _device, _random

    for fn in (_device.is_available, _device.device_count, _device.get_device_name,
               _amp.is_bf16_supported):
        decorators.assume_constant_result(fn)
    for name in _random.__all__:
        decorators.skip(getattr(_random, name))  # marks the function itself


def _rng_prims_loaded(module):
    from .rng_prims import register

    register(module)


def _portable_cache_loaded(module):
    from .cache import register_artifact_type

    register_artifact_type(module)


_HOOKS = {
    "torch._dynamo.backends.registry": _registry_loaded,
    "torch._dynamo.device_interface": _device_interface_loaded,
    "torch._inductor.codegen.common": _inductor_codegen_loaded,
    "torch._dynamo.decorators": _decorators_loaded,
    "torch.compiler._cache": _portable_cache_loaded,
    "torch._prims.rng_prims": _rng_prims_loaded,
}
_done = set()


class _AfterImport:
    """meta_path finder: lets the normal finders locate the hooked modules and
    runs the hook right after each one executes."""

    def find_spec(self, fullname, path=None, target=None):
        hook = _HOOKS.get(fullname)
        if hook is None:
            return None
        return spec_running_after(self, fullname, path, target, lambda module: _run(hook, module))


def _run(hook, module):
    if module.__name__ in _done:
        return
    _done.add(module.__name__)
    try:
        hook(module)
    except Exception as exc:  # never break torch's own import
        warnings.warn(f"torchneuron: could not set up torch.compile for neuron ({module.__name__}): {exc}")


_finder = _AfterImport()


def install():
    """Sets the default backend and the device interface now if Dynamo is loaded, else at its import."""
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _finder)
    for name, hook in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None and not getattr(getattr(module, "__spec__", None), "_initializing", False):
            _run(hook, module)
