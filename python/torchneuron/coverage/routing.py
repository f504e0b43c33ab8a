"""Which experts a mixture-of-experts model routes each token to, so that
forward_bf16 can leave out the tokens that the device routes differently from CPU.

A router picks each token's top-k experts by comparing scores; when two scores
are within one bfloat16 rounding step, the device and CPU may pick different
experts, and that token's logits then differ by the other expert's output. That
is no error of the device, but it is beyond any rounding allowance.

The routing is recorded with forward hooks that leave the model's call as it is:

- the experts module's routing argument (`top_k_index`, or `router_indices` for
  gpt_oss): what the experts were given, after any score correction, group
  limit or masking of the router. Transformers' mixture-of-experts models mostly
  share this interface (`@use_experts_implementation`).
- otherwise the modules that the model's `_can_record_outputs["router_logits"]`
  names (what `output_router_logits=True` collects, e.g. JetMoE's gating, Llama 4's
  router): the top-k of those logits, with the module's `top_k` or the config's
  `num_experts_per_tok`.

A record is one sorted (tokens, k) tensor of expert indices per routed call. A model
without either (a dense model) records nothing, and one whose records do not map
to the batch's tokens (Doge mixes router logits across tokens) records None;
for both forward_bf16 compares all tokens as before.
"""
import contextlib
import inspect

import torch

# The experts module's argument that carries each token's chosen experts.
ROUTING_ARGS = ("top_k_index", "router_indices")
TOP_K_KEYS = ("num_experts_per_tok", "top_k", "moe_top_k", "num_selected_experts")

_arg_positions = {}


def routing_arg(module):
    """(position among the positional arguments after self, name) of the routing argument
    of `module`'s forward, or None. The signature is the original one: `functools.wraps`
    keeps it through `@use_experts_implementation`."""
    cls = type(module)
    if cls not in _arg_positions:
        found = None
        try:
            params = list(inspect.signature(cls.forward).parameters)[1:]
        except (TypeError, ValueError):
            params = []
        for name in ROUTING_ARGS:
            if name in params:
                found = (params.index(name), name)
                break
        _arg_positions[cls] = found
    return _arg_positions[cls]


def _recorder_specs(model):
    """(target class, module-name suffix, layer name, output index) for every router that a
    `_can_record_outputs["router_logits"]` in the model names, with Transformers' defaults
    (a bare class or name: output 1)."""
    from transformers.utils.output_capturing import OutputRecorder

    specs = []
    for module in model.modules():
        entry = (getattr(type(module), "_can_record_outputs", None) or {}).get("router_logits")
        for spec in entry if isinstance(entry, (list, tuple)) else [entry]:
            if spec is None:
                continue
            if isinstance(spec, OutputRecorder):
                specs.append((spec.target_class, spec.class_name, spec.layer_name, spec.index))
            elif isinstance(spec, str):
                specs.append((None, spec, None, 1))
            elif isinstance(spec, type):
                specs.append((spec, None, None, 1))
    return specs


def _matches(spec, name, module):
    target, suffix, layer, _ = spec
    if not ((target is not None and isinstance(module, target)) or (suffix is not None and name.endswith(suffix))):
        return False
    return layer is None or f".{layer.strip('.')}." in f".{name}."


def _top_k(model, module):
    k = getattr(module, "top_k", None)
    if isinstance(k, int):
        return k
    config = getattr(model, "config", None)
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    for key in TOP_K_KEYS:
        k = getattr(text, key, None)
        if isinstance(k, int):
            return k
    return None


@contextlib.contextmanager
def record_routing(model, num_tokens):
    """Collects the routing of the calls of `model` inside the block into the list it yields:
    one (module name, sorted LongTensor of shape (num_tokens, k)) per routed call, in call
    order; (module name, None) for a call whose routing does not map to `num_tokens` tokens."""
    records, raw, handles = [], [], []
    experts = [(n, m, routing_arg(m)) for n, m in model.named_modules() if routing_arg(m) is not None]
    if experts:
        for name, module, (position, arg) in experts:
            def pre_hook(mod, args, kwargs, name=name, position=position, arg=arg):
                index = kwargs.get(arg, args[position] if len(args) > position else None)
                raw.append((name, index.detach().clone() if torch.is_tensor(index) else None))
            handles.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
    else:
        try:
            specs = _recorder_specs(model)
        except ImportError:
            specs = []
        for name, module in model.named_modules():
            spec = next((s for s in specs if _matches(s, name, module)), None)
            if spec is None:
                continue

            def hook(mod, args, output, name=name, index=spec[3], k=_top_k(model, module)):
                logits = output[index] if isinstance(output, (tuple, list)) else output
                if not torch.is_tensor(logits) or k is None or logits.dim() < 1 or logits.shape[-1] < k:
                    raw.append((name, None))
                    return
                raw.append((name, logits.detach().reshape(-1, logits.shape[-1]).float().topk(k, dim=-1).indices))
            handles.append(module.register_forward_hook(hook))
    try:
        yield records
    finally:
        for h in handles:
            h.remove()
    for name, index in raw:
        if index is not None and index.dim() == 1:
            index = index.unsqueeze(-1)  # top-1 routing as one index per token
        usable = index is not None and index.dim() > 0 and not index.is_floating_point()
        if not usable or index.numel() != num_tokens * index.shape[-1]:
            records.append((name, None))
            continue
        records.append((name, index.cpu().reshape(num_tokens, -1).sort(dim=-1).values))


def rerouted_tokens(cpu_records, device_records):
    """A bool tensor over the recorded tokens: those that some routed call sends to other
    experts on the device than on CPU; None when the two runs' records cannot be matched
    call by call (then nothing is left out)."""
    if len(cpu_records) != len(device_records) or not cpu_records:
        return None
    differ = None
    for (cpu_name, cpu_index), (dev_name, dev_index) in zip(cpu_records, device_records):
        if cpu_name != dev_name or cpu_index is None or dev_index is None or cpu_index.shape != dev_index.shape:
            return None
        calls = (cpu_index != dev_index).any(dim=-1)
        if differ is not None and differ.shape != calls.shape:
            return None
        differ = calls if differ is None else differ | calls
    return differ
