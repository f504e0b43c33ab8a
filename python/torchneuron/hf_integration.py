"""Hugging Face Accelerate / Transformers / Diffusers support for the `neuron` device.

`from_pretrained(..., device_map="auto" | "balanced" | "balanced_low_0" |
"sequential")` asks Accelerate how much memory each accelerator has, and
Accelerate only knows a fixed list of vendors: for an unknown device it returns
`{"cpu": ...}` and the whole model is silently loaded on the CPU. This module
adapts the few functions involved so that the model is placed on the neuron
cores by their capacity, as it would be on GPUs. It also makes the device's
errors name the model that ran into them.

Adaptations (1-4 and 8 wrap the original function and defer to it unchanged unless
`neuron` is PyTorch's current accelerator, i.e.
`torch.accelerator.current_accelerator().type == "neuron"`; 5 and 7 act only
on models placed on a neuron device, 6 and 9 only on tensors on a neuron device):

1. `accelerate.utils.imports.is_neuron_available`
   Accelerate's device detection (`PartialState`, `dispatch_model`, seeding,
   `release_memory`, ...) has a `neuron` entry, gated on an importable AWS
   `torch_neuronx`, which can never be installed next to torchneuron. The
   wrapper also answers True when the `neuron` device of torchneuron is there.
   Everything Accelerate then calls (`torch.neuron.current_device`,
   `empty_cache`, `manual_seed`, `get_rng_state_all`, ...) exists.

2. `accelerate.utils.modeling.get_max_memory`
   The source of the silent CPU load. Without `max_memory`, the wrapper
   returns `{0: free bytes of neuron:0, 1: ..., "cpu": available RAM}` from
   `torch.neuron.mem_get_info(i)`. Integer keys are kept on purpose: every
   consumer (Accelerate's and Transformers' `get_balanced_memory`,
   `infer_auto_device_map`) treats integer keys as "the accelerators". With a
   user `max_memory`, it validates integer keys against
   `torch.neuron.device_count()` (not CUDA's count) and also accepts
   `"neuron:1"` / `torch.device("neuron", 1)` keys, normalised to `1`.
   Strings like "2GB" are converted in place, as Accelerate does (Transformers
   relies on that side effect).

3. `transformers.integrations.accelerate._get_device_map`
   For the automatic strategies the computed map holds integer indices; the
   wrapper rewrites them to explicit `"neuron:i"` strings, so that loading,
   `dispatch_model` hooks and `model.hf_device_map` all name the real device.

4. `transformers.integrations.accelerate.check_and_set_device_map`
   Transformers documents integers as CUDA indices (`device_map=0` is "GPU 0")
   and does not map them to `neuron:i`. Instead of an obscure failure or a
   load on another device, `device_map=0` or a dict with integer values
   (`{"": 1}`) raises a ValueError naming what to use: `"neuron:0"` /
   `{"": "neuron:1"}`. Device strings and `torch.device`s pass through.

5. `transformers.modeling_utils.PreTrainedModel`: errors name the architecture
   An error of the neuron backend names the op ("[neuron] aten::mm: ...") but
   not which model ran it. When a model lands on a neuron device
   (`from_pretrained(..., device_map=...)`, `.to(...)`, `.neuron()`), the
   `forward` and `generate` of its class are wrapped (once per class): an
   exception whose message carries the backend's "[neuron]" mark is
   re-raised with the same type, prefixed with "Qwen3ForCausalLM (model_type
   'qwen3') on neuron:0: ", and chained to the original (`raise ... from`).
   Errors of the placement itself (`.to`, `.neuron()`, `from_pretrained`)
   are prefixed the same way. The success path costs one extra Python call
   (about 0.1 us; a forward of even a tiny model takes about 1 ms); other
   errors (CPU ones, after `model.to("cpu")`) pass through unchanged; an
   error is prefixed once, by the outermost wrapper. The wrappers keep the
   method's signature (`__wrapped__`), which `generate()` inspects. Each class
   gets a code object of its own: the wrapper is the outermost frame of a
   compiled forward, and torch.compile counts recompilations per code object,
   so one shared code object made every architecture's compilations count
   against the same limit (8). Being on
   the class, they add no state to the instance: pickling, `copy.deepcopy`,
   state dicts and `save_pretrained` are untouched, and `del model` still
   frees the device memory at once (an instance attribute referring back to
   the model, as Accelerate's `add_hook_to_module` sets, makes a reference
   cycle and leaves that to the garbage collector).

6. `transformers.integrations.sdpa_attention.use_gqa_in_sdpa`
   Decides whether SDPA receives grouped key/value heads (`enable_gqa=True`)
   or copies made by `repeat_kv`. Transformers allows grouping only where a
   kernel supports it (on CUDA only without a mask), so with a padding or
   static-cache mask every layer copies its whole key/value cache every
   decode step. The neuron attention kernel groups heads itself under any
   mask, so for keys on neuron the wrapper answers True; elsewhere the
   original decides.

7. `transformers.modeling_utils.PreTrainedModel.get_compiled_call`: no
   recompilation per decode step with sliding-window caches
   `generate(..., cache_implementation="static")` compiles the decode step by
   itself on a neuron model (`CompileConfig(backend="neuron", dynamic=False)`).
   A sliding-window layer (`StaticSlidingWindowLayer`: Mistral with
   `sliding_window`, Gemma2, ...) keeps its fill level in a Python int,
   `cumulative_length_int`, and its `update` and `get_mask_sizes` branch on it;
   with static shapes Dynamo specializes on the value (guard
   `layers[i].cumulative_length_int == N`), so every decode step recompiled
   until Dynamo's limit (8) and then ran eagerly. For a model on neuron, the
   wrapper returns the compiled call running under
   `torch.compiler.config.patch(dynamic_sources=...)` with a pattern matching
   every `cumulative_length_int` (PyTorch's documented list of sources to
   trace as symbolic values, which wins over `dynamic=False`): the fill level
   becomes a runtime input of the graph, and the branches guard on ranges
   (`cumulative_length_int <= 7`, i.e.
   "not full yet") instead of values. The first `generate()` compiles each
   regime it meets once (filling, full: two graphs), later calls none. Every
   other int and every shape stays static, and models on other devices get the
   original call.

8. `transformers.utils.import_utils.is_torch_neuron_available`
   Transformers' own neuron detection asks for AWS's `torch_neuronx`, as
   Accelerate's does (1). Without it `TrainingArguments` puts training on the
   CPU (`args.device` is cpu, so the Trainer feeds CPU batches to a neuron model),
   `TrainingArguments(torch_compile=True)` picks Inductor instead of the
   backend "neuron", and `TrainingArguments(bf16=True)` is refused ("Your
   setup doesn't support bf16/gpu"). The
   wrapper also answers True when the `neuron` device of torchneuron is
   PyTorch's accelerator; then the Trainer trains on `neuron:0`, compiles
   with `torch.compile(backend="neuron")`, and `is_torch_bf16_gpu_available()`
   asks `torch.neuron.is_bf16_supported()`. Like the original, the answer is
   marked a constant for torch.compile (fixed for the process).

9. `diffusers.utils.torch_utils.randn_tensor`
   Diffusers draws every latent and noise tensor for a `neuron` device on the
   CPU (AWS's devices cannot draw on device) and passed a neuron
   `torch.Generator` along to that CPU draw, which failed with a misleading
   "expected all tensors on one device". With neuron generators (one, or one
   per sample) the wrapper draws on the device with them, as Diffusers does
   for CUDA generators on CUDA; a CPU generator, or none, keeps Diffusers' CPU
   draw (so a seeded CPU generator gives the CPU pipeline's numbers).

Checked and left alone: the allocator warm-up of `from_pretrained`
(`transformers.modeling_utils.caching_allocator_warmup`) reserves one block of
the model's size on CUDA/XPU devices and skips device type "neuron" (meant for
AWS's devices), so loading onto neuron reserves what the parameters need and
no more (tests/test_hf_loading.py checks that the peak stays below 1.5x the
parameter bytes, also with a CUDA-style warm-up block in front of the load).

How the adaptations are applied, and why this way: importing torchneuron must
stay fast and must not import Accelerate or Transformers (importing
Transformers takes seconds). Both libraries bind these functions by name into
other modules at import time (`from .modeling import get_max_memory`,
`from .integrations.accelerate import _get_device_map`), so patching after the
fact would have to chase every copy. A small `sys.meta_path` finder instead
runs the original loader of exactly the defining modules (listed in
`_TARGETS`) and wraps the functions right after each module executes, before
anything else can import them by name. The finder only installs itself if
`accelerate` or `transformers` is findable, and costs one dict lookup per
import. Adaptations 5 and 7 patch the class `PreTrainedModel` in place (its
`to`, `neuron`, `from_pretrained` and `get_compiled_call`), so they have no
copies to chase. If a
target module is already imported when torchneuron is (unusual: `import
torch` autoloads torchneuron first), it is patched at once and the already
bound copies in other loaded `accelerate` / `transformers` modules are
replaced too. A target that is itself the first to import torch (e.g.
`from transformers import PreTrainedModel` before `import torch`) is still
half-executed then; it is patched, copies included, at the next import of
any module after it finishes. Everything is idempotent; a target function
missing in some future version gives a warning instead of an error.
"""
import contextlib
import functools
import importlib.util
import sys
import types
import warnings

import torch

from ._import_hooks import spec_running_after

__all__ = ["install", "name_architecture_in_errors", "neuron_is_accelerator"]

_PATCHED_ATTR = "__torchneuron_patched__"
_AUTO_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def neuron_is_accelerator():
    """True when `neuron` is PyTorch's current accelerator and has a core."""
    try:
        acc = torch.accelerator.current_accelerator()
        return acc is not None and acc.type == "neuron" and torch.neuron.device_count() > 0
    except Exception:
        return False


# ---------------------------------------------------------------- wrappers


def _wrap_is_neuron_available(original):
    def is_neuron_available(check_device=False):
        if neuron_is_accelerator():
            return True
        return original(check_device)

    return is_neuron_available


def _neuron_index(key):
    """Normalise a max_memory key: neuron devices become their index."""
    if isinstance(key, torch.device):
        if key.type == "neuron":
            return key.index if key.index is not None else torch.neuron.current_device()
        return key.type
    if isinstance(key, str) and key.startswith("neuron"):
        dev = torch.device(key)
        return dev.index if dev.index is not None else torch.neuron.current_device()
    return key


def _wrap_is_torch_neuron_available(original):
    def is_torch_neuron_available(check_device=False):
        if neuron_is_accelerator():
            return True
        return original(check_device)

    is_torch_neuron_available._dynamo_marked_constant = True  # as Transformers marks the original
    return is_torch_neuron_available


def _wrap_get_max_memory(original, module):
    def get_max_memory(max_memory=None):
        if not neuron_is_accelerator():
            return original(max_memory)
        import psutil

        count = torch.neuron.device_count()
        if max_memory is None:
            result = {}
            for i in range(count):
                try:
                    result[i] = torch.neuron.mem_get_info(i)[0]
                except Exception:
                    continue
            result["cpu"] = psutil.virtual_memory().available
            return result

        convert = module.convert_file_size_to_int
        normalised = {}
        for key in list(max_memory):
            if isinstance(max_memory[key], str):
                max_memory[key] = convert(max_memory[key])  # in place, as Accelerate does
            normalised[_neuron_index(key)] = max_memory[key]
        indices = sorted(k for k in normalised if isinstance(k, int) and not isinstance(k, bool))
        for i in indices:
            if i < 0 or i >= count:
                raise ValueError(
                    f"max_memory names neuron device {i}, but there are {count} neuron devices "
                    f"(valid keys: {list(range(count))} or 'neuron:0'..'neuron:{count - 1}', 'cpu', 'disk')."
                )
        others = [k for k in ("cpu", "disk") if k in normalised]
        unknown = [k for k in normalised if k not in indices and k not in others]
        if unknown:
            raise ValueError(
                f"max_memory keys {unknown} are not recognised; use neuron indices or 'neuron:i', 'cpu' and 'disk'."
            )
        return {k: normalised[k] for k in indices + others}

    return get_max_memory


def _wrap_get_device_map(original):
    def _get_device_map(model, device_map, *args, **kwargs):
        requested = device_map
        result = original(model, device_map, *args, **kwargs)
        if isinstance(requested, str) and requested in _AUTO_STRATEGIES and neuron_is_accelerator():
            if isinstance(result, dict):
                for name, dev in list(result.items()):
                    if isinstance(dev, int) and not isinstance(dev, bool):
                        result[name] = f"neuron:{dev}"
        return result

    return _get_device_map


def _integer_device_map_error(device_map):
    if isinstance(device_map, bool):
        return None
    if isinstance(device_map, int) and device_map >= 0:
        return (
            f"device_map={device_map!r}: Transformers treats integer device indices as CUDA devices and "
            f"does not map them to the neuron device. Use device_map=\"neuron:{device_map}\" "
            f"(or {{\"\": \"neuron:{device_map}\"}}) instead, or device_map=\"auto\" to spread the model "
            "over all neuron cores."
        )
    if isinstance(device_map, dict):
        bad = {k: v for k, v in device_map.items() if isinstance(v, int) and not isinstance(v, bool)}
        if bad:
            fixed = {k: f"neuron:{v}" for k, v in bad.items()}
            return (
                f"device_map has integer device indices {bad}: Transformers treats them as CUDA devices and "
                f"does not map them to the neuron device. Use device strings instead, e.g. {fixed} "
                "(\"neuron:0\", \"neuron:1\", ...)."
            )
    return None


def _wrap_check_and_set_device_map(original):
    def check_and_set_device_map(device_map):
        if neuron_is_accelerator():
            message = _integer_device_map_error(device_map)
            if message is not None:
                raise ValueError(message)
        return original(device_map)

    return check_and_set_device_map


# ------------------------------------------- errors name the architecture

_NEURON_MARK = "[neuron]"  # every message of the backend carries it (csrc/runtime/NeuronException.cpp)
_WRAPPED_ATTR = "__torchneuron_names_errors__"
_NAMED_ATTR = "__torchneuron_named__"


def _architecture(model, device=None):
    """'Qwen3ForCausalLM (model_type 'qwen3') on neuron:0' (or the class of a model type)."""
    cls = model if isinstance(model, type) else type(model)
    config = getattr(model, "config", None) if not isinstance(model, type) else None
    model_type = getattr(config, "model_type", None) or getattr(getattr(cls, "config_class", None), "model_type", None)
    if device is None:
        try:
            device = model.device
        except Exception:
            device = "neuron"
    kind = f" (model_type {model_type!r})" if model_type else ""
    return f"{cls.__name__}{kind} on {device}"


def _named_error(exc, model, device=None):
    """The exception to raise instead of `exc`, or None to let `exc` through."""
    if getattr(exc, _NAMED_ATTR, False):
        return None
    message = str(exc)
    if _NEURON_MARK not in message:
        return None
    if message.startswith(_NEURON_MARK + " "):
        message = message[len(_NEURON_MARK) + 1:]
    try:
        named = type(exc)(f"{_architecture(model, device)}: {message}")
    except Exception:  # an exception type that takes other arguments: keep the original
        return None
    setattr(named, _NAMED_ATTR, True)
    return named


def _naming_errors(method, owner=""):
    """`method` (a function of the class `owner`) re-raising the backend's errors with the architecture named."""

    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            named = _named_error(exc, self)
            if named is None:
                raise
            raise named from exc

    # A code object of its own per class: torch.compile caches compiled frames, and counts
    # recompilations against its limit (8), per code object. The wrapper is the outermost
    # frame of a compiled forward, so one shared code object would make every architecture's
    # graphs recompilations of one frame, and after a few architectures Dynamo would run
    # them all eagerly.
    name = f"{owner}_{method.__name__}" if owner else wrapper.__name__
    code = wrapper.__code__.replace(co_name=name, co_qualname=name)
    wrapper = types.FunctionType(code, wrapper.__globals__, name, wrapper.__defaults__, wrapper.__closure__)
    wrapper = functools.wraps(method)(wrapper)
    setattr(wrapper, _WRAPPED_ATTR, True)
    return wrapper


def name_architecture_in_errors(model):
    """Wraps `forward` and `generate` of the model's class so that errors of the
    neuron backend name the architecture (idempotent; see adaptation 5)."""
    cls = type(model)
    if cls.__dict__.get(_WRAPPED_ATTR, False):
        return model
    # On the class, not the instance: an instance attribute referring back to the model
    # would make a reference cycle, and `del model` would no longer free device memory.
    for name in ("forward", "generate"):
        method = getattr(cls, name, None)
        if method is not None and not getattr(method, _WRAPPED_ATTR, False):
            setattr(cls, name, _naming_errors(method, cls.__name__))
    setattr(cls, _WRAPPED_ATTR, True)
    return model


def _on_neuron(model):
    return any(p.device.type == "neuron" for p in model.parameters())


def _neuron_device(device):
    """"neuron", "neuron:1" for `.neuron(device)`'s argument (None, an index or a device)."""
    if device is None:
        return "neuron"
    return f"neuron:{device}" if isinstance(device, int) else str(device)


def _target_device(args, kwargs):
    try:
        device = torch._C._nn._parse_to(*args, **kwargs)[0]
    except Exception:
        return None
    return device if device is not None and device.type == "neuron" else None


def _patch_pretrained_model(module):
    cls = getattr(module, "PreTrainedModel", None)
    if cls is None:
        warnings.warn(
            f"torchneuron: {module.__name__}.PreTrainedModel not found; errors on the neuron device will not "
            "name the architecture with this version.",
            stacklevel=2,
        )
        return
    if cls.__dict__.get(_PATCHED_ATTR, False):
        return
    original_to = cls.to

    @functools.wraps(original_to)
    def to(self, *args, **kwargs):
        device = _target_device(args, kwargs)
        if device is None:
            return original_to(self, *args, **kwargs)
        try:
            result = original_to(self, *args, **kwargs)
        except Exception as exc:
            named = _named_error(exc, self, device)
            if named is None:
                raise
            raise named from exc
        return name_architecture_in_errors(result)

    cls.to = to

    original_neuron = getattr(cls, "neuron", None)  # generated by torch for the renamed backend
    if original_neuron is not None:

        @functools.wraps(original_neuron)
        def neuron(self, *args, **kwargs):
            try:
                result = original_neuron(self, *args, **kwargs)
            except Exception as exc:
                named = _named_error(exc, self, _neuron_device(args[0] if args else kwargs.get("device")))
                if named is None:
                    raise
                raise named from exc
            return name_architecture_in_errors(result)

        cls.neuron = neuron

    original_from_pretrained = cls.__dict__["from_pretrained"].__func__

    @functools.wraps(original_from_pretrained)
    def from_pretrained(klass, *args, **kwargs):
        try:
            result = original_from_pretrained(klass, *args, **kwargs)
        except Exception as exc:
            device_map = kwargs.get("device_map")
            named = _named_error(exc, klass, device_map if isinstance(device_map, (str, torch.device)) else "neuron")
            if named is None:
                raise
            raise named from exc
        model = result[0] if isinstance(result, tuple) else result
        if isinstance(model, torch.nn.Module) and _on_neuron(model):
            name_architecture_in_errors(model)
        return result

    cls.from_pretrained = classmethod(from_pretrained)

    original_get_compiled_call = getattr(cls, "get_compiled_call", None)
    if original_get_compiled_call is not None:

        @functools.wraps(original_get_compiled_call)
        def get_compiled_call(self, *args, **kwargs):
            compiled = original_get_compiled_call(self, *args, **kwargs)
            if compiled is self.__call__ or not _on_neuron(self):
                return compiled
            return _with_runtime_cache_lengths(compiled)

        cls.get_compiled_call = get_compiled_call
    setattr(cls, _PATCHED_ATTR, True)


# Sources Dynamo traces as symbolic ints, never as constants (adaptation 7).
_RUNTIME_CACHE_LENGTHS = r".*\.cumulative_length_int"


def _with_runtime_cache_lengths(compiled):
    """`compiled` (a torch.compile'd call) compiling with the caches' fill levels as runtime values."""

    @functools.wraps(compiled)
    def call(*args, **kwargs):
        config = torch.compiler.config
        sources = config.dynamic_sources
        if _RUNTIME_CACHE_LENGTHS not in sources.split(","):
            sources = f"{sources},{_RUNTIME_CACHE_LENGTHS}" if sources else _RUNTIME_CACHE_LENGTHS
        with config.patch(dynamic_sources=sources):
            return compiled(*args, **kwargs)

    return call


def _wrap_use_gqa_in_sdpa(original):
    def use_gqa_in_sdpa(attention_mask, key, *args, **kwargs):
        if key.device.type == "neuron":
            return True  # the neuron attention kernel groups heads itself, under any mask
        return original(attention_mask, key, *args, **kwargs)

    return use_gqa_in_sdpa


# ------------------------------------------------------------ installation

# module name -> [(function name, wrapper factory(original, module))]
def _wrap_randn_tensor(original):
    def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
        target = torch.device(device) if isinstance(device, str) else device
        generators = generator if isinstance(generator, list) else [generator]
        if (target is None or target.type != "neuron" or generator is None
                or any(g is None or g.device.type != "neuron" for g in generators)):
            return original(shape, generator=generator, device=device, dtype=dtype, layout=layout)
        layout = layout or torch.strided
        if len(generators) == 1:
            return torch.randn(shape, generator=generators[0], device=target, dtype=dtype, layout=layout)
        # One generator per sample, as Diffusers seeds a batch.
        one = (1, *shape[1:])
        return torch.cat([torch.randn(one, generator=g, device=target, dtype=dtype, layout=layout)
                          for g in generators])

    return randn_tensor


_TARGETS = {
    "diffusers.utils.torch_utils": [("randn_tensor", lambda f, m: _wrap_randn_tensor(f))],
    "accelerate.utils.imports": [("is_neuron_available", lambda f, m: _wrap_is_neuron_available(f))],
    "accelerate.utils.modeling": [("get_max_memory", _wrap_get_max_memory)],
    "transformers.integrations.accelerate": [
        ("check_and_set_device_map", lambda f, m: _wrap_check_and_set_device_map(f)),
        ("_get_device_map", lambda f, m: _wrap_get_device_map(f)),
    ],
    "transformers.utils.import_utils": [
        ("is_torch_neuron_available", lambda f, m: _wrap_is_torch_neuron_available(f)),
    ],
    "transformers.integrations.sdpa_attention": [
        ("use_gqa_in_sdpa", lambda f, m: _wrap_use_gqa_in_sdpa(f)),
    ],
}


# module name -> [patch(module)]: classes patched in place
_CLASS_PATCHES = {
    "transformers.modeling_utils": [_patch_pretrained_model],
}
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
                if not other_name.startswith(("accelerate", "transformers", "diffusers")):
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
    if not any(_findable(name) for name in ("accelerate", "transformers", "diffusers")):
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


install()
