"""Transformers model adaptations (5, 6, 7, 14). Checked against transformers 5.23.0.

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

14. `transformers.models.jetmoe.modeling_jetmoe`: JetMoe's experts without
   recompilation (`JetMoeTopKGating.forward`, `JetMoeParallelExperts.forward`)
   JetMoe's router counts the rows each expert receives and turns the counts
   into a Python list (`expert_size.tolist()`); its experts split the rows
   sorted by expert with that list (`inputs.split(expert_size)`) and run one
   `F.linear` per part. Under `torch.compile` the `.tolist()` is a graph break
   and the split makes Dynamo guard on every expert's count (guard
   `___stack0[3][1] == 1  # input_list = inputs.split(expert_size, ...`), so
   the static-cache decode step that `generate()` compiles recompiled whenever
   the routing changed: a second `generate()` with a prompt of the same length
   compiled again (and a frame past Dynamo's recompile limit, 8, runs
   eagerly). The first call alone compiled 16 graphs (the graph breaks). Only while
   Dynamo traces (`torch.compiler.is_compiling()`) and only for tensors on a
   neuron device, the router keeps the counts as a tensor (otherwise its code,
   copied from 5.23, is unchanged: the same top-k, softmax, sort and gates) and
   the experts compute every row with static shapes: each expert's `F.linear`
   over all the sorted rows, each row keeping its own expert's result
   (`torch.where` on the row's expert, found from the counts' running sum).
   No graph break and no data-dependent shape remain; the step compiles once
   and runs as one program. The cost: each expert multiplies every row, i.e.
   `num_local_experts / num_experts_per_tok` times the products of the original
   (4x for JetMoe's 8 experts and top 2; a decode step has batch x top_k rows),
   with intermediates the size of the original's. Results equal the original
   up to rounding of the matrix products (each output element is the same dot
   product; tests/test_hf_jetmoe.py compares them). Eager execution runs the
   original methods unchanged (one extra Python call each).
   Not `torch._grouped_mm`, the one-product form: with torch 2.13 its fake
   (meta) kernel accepts only bfloat16 inputs, so Dynamo's tracing of a float32
   model fails, and its CPU backward raises "Invalid strides/sizes" when the
   incoming gradient is expanded (e.g. from `.sum()`).

"""
import functools
import types

import torch

from ._common import PATCHED_ATTR as _PATCHED_ATTR
from ._common import classes_to_adapt


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
    found = classes_to_adapt(module, ("PreTrainedModel",),
                             "errors on the neuron device will not name the architecture")
    if found is None:
        return
    (cls,) = found
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
            # == : each access to self.__call__ makes a new bound method.
            if compiled == self.__call__ or not _on_neuron(self):
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



# ------------------------------------------------------------- JetMoe (adaptation 14)


def _tracing_on_neuron(tensor):
    return torch.compiler.is_compiling() and tensor.device.type == "neuron"


def _jetmoe_gating_counts_as_tensor(self, hidden_states):
    """`JetMoeTopKGating.forward` of transformers 5.23 with `expert_size` kept as a
    tensor (the original's `.tolist()` is a graph break and makes Dynamo guard on it)."""
    logits = self.layer(hidden_states).float()  # [num_tokens, num_experts]
    top_k_logits, top_k_indices = logits.topk(self.top_k, dim=1)  # [num_tokens, top_k]
    top_k_gates = torch.softmax(top_k_logits, dim=1).type_as(hidden_states)  # [num_tokens, top_k]

    zeros = torch.zeros([top_k_gates.size(0), self.num_experts], dtype=top_k_gates.dtype, device=top_k_gates.device)
    gates = zeros.scatter(1, top_k_indices, 1)  # [num_tokens, num_experts]
    expert_size = gates.long().sum(0)  # [num_experts]: stays a tensor

    top_k_experts = top_k_indices.flatten()  # [num_tokens * top_k]
    _, index_sorted_experts = top_k_experts.sort(0)
    batch_index = index_sorted_experts.div(self.top_k, rounding_mode="trunc")
    top_k_gates = top_k_gates.flatten()
    batch_gates = top_k_gates[index_sorted_experts]
    return index_sorted_experts, batch_index, batch_gates, expert_size, logits


def _jetmoe_experts_static(self, inputs, expert_size):
    """`JetMoeParallelExperts.forward` with the counts as a tensor and static shapes:
    row r of `inputs` (sorted by expert) gets `F.linear(inputs[r], weight[e])` for its
    expert e, computed as every expert's product over all rows, each row keeping its own."""
    rows = inputs.shape[0]
    ends = expert_size.cumsum(0)  # the sorted rows of expert e end at ends[e]
    positions = torch.arange(rows, device=inputs.device, dtype=ends.dtype)
    expert = torch.searchsorted(ends, positions, right=True)[:, None]  # [rows, 1]: the expert of each row
    output = inputs.new_zeros(rows, self.output_size)
    for i in range(self.num_experts):
        output = torch.where(expert == i, torch.nn.functional.linear(inputs, self.weight[i]), output)
    return output


def _patch_jetmoe(module):
    found = classes_to_adapt(module, ("JetMoeTopKGating", "JetMoeParallelExperts"),
                             "compiled JetMoe models may recompile when the routing changes")
    if found is None:
        return
    gating, experts = found
    original_gating = gating.forward
    original_experts = experts.forward

    @functools.wraps(original_gating)
    def gating_forward(self, hidden_states):
        if _tracing_on_neuron(hidden_states):
            return _jetmoe_gating_counts_as_tensor(self, hidden_states)
        return original_gating(self, hidden_states)

    @functools.wraps(original_experts)
    def experts_forward(self, inputs, expert_size):
        if isinstance(expert_size, torch.Tensor) and _tracing_on_neuron(inputs):
            return _jetmoe_experts_static(self, inputs, expert_size)
        return original_experts(self, inputs, expert_size)

    gating.forward = gating_forward
    experts.forward = experts_forward
    setattr(gating, _PATCHED_ATTR, True)


TARGETS = {
    "transformers.integrations.sdpa_attention": [
        ("use_gqa_in_sdpa", lambda f, m: _wrap_use_gqa_in_sdpa(f)),
    ],
}
# module name -> [patch(module)]: classes patched in place
CLASS_PATCHES = {
    "transformers.modeling_utils": [_patch_pretrained_model],
    "transformers.models.jetmoe.modeling_jetmoe": [_patch_jetmoe],
}
