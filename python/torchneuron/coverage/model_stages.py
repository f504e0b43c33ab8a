"""to_device, forward, backward and forward_bf16: one call of the model, compared
by its parameters, logits or gradients rather than by generated tokens."""
import copy

import torch

from .common import SEED, max_abs_diff, short_error
from .routing import record_routing, rerouted_tokens
from .tiny_configs import build_config, check_config

# Gradients add up many products: a little looser than the float32 defaults.
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)


def build_cpu_model(row):
    import transformers

    config, kwargs = build_config(row)
    problems = check_config(config)
    if problems:
        raise ValueError("config: " + "; ".join(problems))
    torch.manual_seed(SEED)
    model_class = getattr(transformers, row["causal_lm_class"])
    text = config.get_text_config(decoder=True)
    if isinstance(config, model_class.config_class):
        model = model_class(config)
    elif isinstance(text, model_class.config_class):  # a composite whose causal LM is its decoder (MusicGen)
        model = model_class(text)
    else:  # a composite config whose causal LM takes the text config: as users build it
        model = transformers.AutoModelForCausalLM.from_config(config)
    return model.to(torch.float32).eval(), kwargs


def shared_parameter_groups(model):
    """Lists of names that refer to one Parameter object (tied weights)."""
    groups = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(p), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def set_parameter(model, name, param):
    module_name, _, attr = name.rpartition(".")
    setattr(model.get_submodule(module_name) if module_name else model, attr, param)


def move_to_device(cpu_model, device):
    """model.to(device) as a user writes it; returns (device model, problems).

    Checks that parameter sharing (tied embeddings, shared blocks) survives the
    move; where it did not, re-ties the device model like the CPU model so that the
    later stages still compare the same computation."""
    dev_model = copy.deepcopy(cpu_model).to(device)
    # The same weights on both sides (a plain copy of the CPU state_dict).
    dev_model.load_state_dict({k: v.to(device) for k, v in cpu_model.state_dict().items()})
    dev_model.eval()
    problems = []
    for names in shared_parameter_groups(cpu_model):
        params = [dev_model.get_parameter(n) for n in names]
        if any(p is not params[0] for p in params[1:]):
            problems.append(" = ".join(names))
            for n in names[1:]:
                set_parameter(dev_model, n, params[0])
    wrong = [n for n, p in dev_model.named_parameters() if p.device.type != torch.device(device).type]
    if wrong:
        problems.append(f"{len(wrong)} parameters not on {device}, e.g. {wrong[0]}")
    return dev_model, problems


def stage_forward(model, ids, mask):
    """Logits of one batch; compared with the float32 tolerances of `torch.testing.assert_close`."""
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.detach()


def sdpa_not_applicable(model):
    if not getattr(model, "_supports_sdpa", False):
        return f"{type(model).__name__} has no sdpa attention"
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "sdpa":
        return f"attention defaults to {impl!r}, not 'sdpa'"
    return None


def eager_copy(model):
    copied = copy.deepcopy(model)
    copied.set_attn_implementation("eager")
    return copied


def stage_forward_routed(model, ids, mask):
    """stage_forward's logits and, for a mixture-of-experts model, the experts each token
    was routed to in each routed call (routing.record_routing; [] for a dense model)."""
    with record_routing(model, ids.numel()) as routing:
        logits = stage_forward(model, ids, mask)
    return logits, routing


# At most this share of the tokens may be left out of forward_bf16 for being routed to other
# experts on the device than on CPU. A token is rerouted only where two router scores lie
# within a rounding step of each other (mellum: 1 of 16 tokens); a router that the device
# computes wrongly reroutes most tokens, and three quarters of the tokens remain to judge.
MAX_REROUTED_SHARE = 0.25


def routed_tokens_kept(exact, cpu_routing, device_routing, extra):
    """Which tokens (a bool mask over the logits' first two dimensions) forward_bf16 judges:
    None for all of them. Notes the routing comparison in `extra`; raises when more than
    MAX_REROUTED_SHARE of the tokens are routed differently."""
    if not cpu_routing and not device_routing:
        return None  # a dense model: every token, as always
    extra["routed_calls"] = len(cpu_routing)
    rerouted = rerouted_tokens(cpu_routing, device_routing)
    if rerouted is None or exact.dim() < 3 or rerouted.numel() != exact.shape[0] * exact.shape[1]:
        extra["routing_not_compared"] = (
            "the routing records of the device and CPU do not match call by call, or not the logits' tokens")
        return None
    count, total = int(rerouted.sum()), rerouted.numel()
    extra["excluded_tokens"] = count
    if not count:
        return None
    rerouted = rerouted.view(exact.shape[:2])
    extra["excluded_positions"] = rerouted.nonzero().tolist()
    extra["excluded_reason"] = "routed to other experts on the device than in CPU's bfloat16 run"
    if count > MAX_REROUTED_SHARE * total:
        raise AssertionError(
            f"{count} of {total} tokens are routed to other experts on the device than in CPU's bfloat16 run "
            f"(at most {MAX_REROUTED_SHARE:.0%} may be left out), e.g. row {extra['excluded_positions'][0][0]} "
            f"position {extra['excluded_positions'][0][1]}")
    return ~rerouted


def compare_bf16(ref, got):
    """The model in bfloat16 on both sides: the device's logits must be about as
    close to the float32 model's as CPU's, at most twice CPU's largest error (with
    its default attention or, for sdpa models, eager attention, whichever is
    larger), plus the float32 tolerance. The device may round differently (it has
    its own attention kernel), and in mixture-of-experts models a rounding
    difference can pick another expert, on CPU as well.

    In a mixture-of-experts model the tokens that the device routes to other
    experts than CPU's bfloat16 run (a near-tie of router scores decided by one
    rounding step) are left out, at most MAX_REROUTED_SHARE of them, and recorded
    (excluded_tokens, excluded_positions, excluded_reason); the other tokens,
    including later positions that attend to a rerouted one, are held to the
    same limit. A dense model is compared on every token."""
    ref_bf16, exact, ref_eager, cpu_routing = ref
    got, device_routing = got
    got = got.cpu()
    if got.dtype != ref_bf16.dtype:  # bfloat16, or float32 for models that upcast their logits
        raise AssertionError(f"device logits are {got.dtype}, CPU's {ref_bf16.dtype}")
    cpu_error = max_abs_diff(exact, ref_bf16)
    extra = {"cpu_error": cpu_error}
    # CPU's bfloat16 error with either attention: a router that picks experts by comparing
    # scores (phimoe) turns a rounding difference into a different expert on CPU as well.
    noise = cpu_error
    if ref_eager is not None:
        extra["cpu_eager_error"] = max_abs_diff(exact, ref_eager)
        noise = max(noise, extra["cpu_eager_error"])
    # Twice that, plus the float32 tolerance of the forward stage.
    limit = 2 * noise + 1e-5
    keep = routed_tokens_kept(exact, cpu_routing, device_routing, extra) if exact.shape == got.shape else None
    if keep is None:
        device_error = max_abs_diff(exact, got)
        if not device_error <= limit:
            raise AssertionError(f"bfloat16 logits on the device are {device_error:.3g} from the float32 model's, "
                                 f"CPU's are {cpu_error:.3g} (limit {limit:.3g})")
        return device_error, extra
    device_error = max_abs_diff(exact[keep], got[keep])
    if not device_error <= limit:
        raise AssertionError(
            f"bfloat16 logits on the device are {device_error:.3g} from the float32 model's on the "
            f"{int(keep.sum())} of {keep.numel()} tokens routed as on CPU, CPU's are {cpu_error:.3g} "
            f"(limit {limit:.3g}){worst_token_note(exact, got, keep)}")
    return device_error, extra


def worst_token_note(exact, got, keep):
    """Where the worst token judged lies after a rerouted token in its row: attention mixes the
    rerouted token's other expert output into later positions."""
    error = (exact.float() - got.float()).abs().flatten(2).amax(-1).masked_fill(~keep, -1)
    row, position = divmod(int(error.argmax()), keep.shape[1])
    before = (~keep[row, :position]).nonzero().flatten().tolist()
    if not before:
        return f"; worst at row {row} position {position}"
    return (f"; worst at row {row} position {position}, after the rerouted position(s) {before} of its row, "
            "whose other expert output reaches it through attention")


def stage_backward(model, ids, mask):
    """Gradients of the language-modelling loss for every parameter."""
    model.zero_grad(set_to_none=True)
    # No cache: a training step does not need one (and RWKV updates its cached state in place).
    out = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False)
    loss = out.loss if getattr(out, "loss", None) is not None else out.logits.float().sum()
    loss.backward()
    grads = {n: (None if p.grad is None else p.grad.detach()) for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads


def stage_backward_reference(model, ids, mask):
    """CPU's float32 gradients, plus those of a float64 copy of the model (None
    when the model does not run in float64): the measure for gradients where
    two float32 runs that sum in different orders differ beyond GRAD_TOL."""
    loss, grads = stage_backward(model, ids, mask)
    try:
        exact = stage_backward(copy.deepcopy(model).double(), ids, mask)[1]
    except Exception:  # noqa: BLE001 - some models assume float32; then the plain comparison stands
        exact = None
    return loss, grads, exact


def as_close_as_cpu(got, cpu, exact):
    """Whether the device's gradient is at most twice as far from the float64
    one as CPU's (plus one float32 ulp of the largest value)."""
    if exact is None or exact.shape != got.shape:
        return False
    exact = exact.double()
    scale = exact.abs().max().item() if exact.numel() else 0.0
    device_error = (got.cpu().double() - exact).abs().max().item() if exact.numel() else 0.0
    cpu_error = (cpu.double() - exact).abs().max().item() if exact.numel() else 0.0
    return device_error <= 2 * cpu_error + torch.finfo(torch.float32).eps * scale


def compare_grads(ref, got):
    ref_loss, ref_grads, exact_grads = ref
    loss, grads = got
    torch.testing.assert_close(loss.cpu(), ref_loss)
    worst = max_abs_diff(ref_loss, loss)
    if set(ref_grads) != set(grads):
        raise AssertionError(f"parameters differ: {sorted(set(ref_grads) ^ set(grads))[:5]}")
    for name, g_ref in ref_grads.items():
        g = grads[name]
        if (g_ref is None) != (g is None):
            raise AssertionError(f"gradient of {name} is {'missing' if g is None else 'unexpected'} on the device")
        if g is None:
            continue
        try:
            torch.testing.assert_close(g.cpu(), g_ref, equal_nan=True, **GRAD_TOL)
        except AssertionError as e:
            exact = exact_grads.get(name) if exact_grads else None
            if not as_close_as_cpu(g, g_ref, exact):
                raise AssertionError(f"gradient of {name}: {short_error(e, 400)}") from None
        worst = max(worst, max_abs_diff(g_ref, g))
    return worst
