"""How the adaptations are applied: a `sys.meta_path` finder patches each target
module right after it executes (see the package's docstring for why)."""
import importlib.util
import sys
import warnings

from .._import_hooks import spec_running_after
from . import (_accelerate, _diffusers, _peft, _safetensors, _transformers_device_map, _transformers_generation,
               _transformers_models, _transformers_training, _trl)
from ._common import PATCHED_ATTR as _PATCHED_ATTR

# The libraries adapted: the finder installs itself if one of them is findable, and
# copies of a wrapped function are chased through their loaded modules.
LIBRARIES = ("accelerate", "transformers", "diffusers", "peft", "safetensors", "trl")
_BY_LIBRARY = (_accelerate, _transformers_device_map, _transformers_models, _transformers_generation,
               _transformers_training, _diffusers, _peft, _safetensors, _trl)


def _merged(attr):
    merged = {}
    for part in _BY_LIBRARY:
        for module_name, entries in getattr(part, attr, {}).items():
            merged.setdefault(module_name, []).extend(entries)
    return merged


# module name -> [(function name, wrapper factory(original, module))]
_TARGETS = _merged("TARGETS")
# module name -> [patch(module)]: classes patched in place
_CLASS_PATCHES = _merged("CLASS_PATCHES")
_WATCHED = set(_TARGETS) | set(_CLASS_PATCHES)


# Target modules found half-executed by install(): patched once they finish.
_pending = set()


def _initializing(module):
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _patch_pending():
    for name in list(_pending):
        module = sys.modules.get(name)
        if module is None:
            _pending.discard(name)
        elif not _initializing(module):
            _pending.discard(name)
            _patch_module(module, rebind_copies=True)


def _patch_module(module, rebind_copies=False, force=False):
    if not force and _initializing(module):
        # A target that imports torch first (`from transformers import PreTrainedModel` before
        # `import torch`) is half-executed while torchneuron autoloads: its names do not exist yet.
        _pending.add(module.__name__)
        return
    for patch in _CLASS_PATCHES.get(module.__name__, ()):
        patch(module)
    for name, factory in _TARGETS.get(module.__name__, ()):
        original = getattr(module, name, None)
        if original is None:
            warnings.warn(
                f"torchneuron: {module.__name__}.{name} not found; its adaptation to the neuron "
                "device (torchneuron.hf_integration) is skipped with this version.",
                stacklevel=2,
            )
            continue
        if getattr(original, _PATCHED_ATTR, False):
            continue
        wrapper = factory(original, module)
        wrapper.__name__ = getattr(original, "__name__", name)
        wrapper.__qualname__ = getattr(original, "__qualname__", name)
        wrapper.__doc__ = getattr(original, "__doc__", None)
        wrapper.__wrapped__ = original
        setattr(wrapper, _PATCHED_ATTR, True)
        if hasattr(original, "cache_clear"):  # keep lru_cache's API available
            wrapper.cache_clear = original.cache_clear
        setattr(module, name, wrapper)
        if rebind_copies:
            for other_name, other in list(sys.modules.items()):
                if other is None or other is module:
                    continue
                if not other_name.startswith(LIBRARIES):
                    continue
                try:
                    if other.__dict__.get(name) is original:
                        setattr(other, name, wrapper)
                except Exception:
                    continue


class _PatchOnImport:
    """meta_path finder: lets the normal finders locate the target modules and
    wraps their loader so that the patches apply right after execution."""

    def find_spec(self, fullname, path=None, target=None):
        if _pending:
            _patch_pending()
        if fullname not in _WATCHED:
            return None
        return spec_running_after(self, fullname, path, target, lambda module: _patch_module(module, force=True))


_finder = _PatchOnImport()


def install():
    """Apply the adaptations (idempotent). Cheap: imports neither library."""
    if not any(_findable(name) for name in LIBRARIES):
        return
    if not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _finder)
    for name in _WATCHED:
        module = sys.modules.get(name)
        if module is not None:
            _patch_module(module, rebind_copies=True)


def _findable(name):
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False



