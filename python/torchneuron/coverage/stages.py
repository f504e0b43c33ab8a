"""Runs one architecture through the coverage stages, on CPU and on the device.

Each stage runs the CPU model first (the reference) and then the same model on
the device, and compares:

- forward: logits of one batch (float32 tolerances of `torch.testing.assert_close`);
- generate_dynamic: greedy decoding of NEW_TOKENS tokens with the default dynamic
  cache (tokens equal);
- generate_static: the same with `cache_implementation="static"` (tokens equal); not
  applicable where the model takes no Cache instances (Transformers'
  `_supports_default_dynamic_cache()`) or the CPU run itself fails;
- backward: gradients of the language-modelling loss for every parameter.

Before them, `to_device` checks that `model.to(device)` keeps shared (tied)
parameters shared; where it does not, the device model is re-tied so that the
other stages still compare the same computation.

A stage whose CPU reference fails is a failure of the setup, not of the device,
and says so ("cpu reference: ..."), except generate_static, which then becomes
not applicable. Generation runs with `disable_compile=True`: with a static cache
on a `neuron` device Transformers would otherwise `torch.compile` the decoding
step with a Dynamo backend named "neuron", and this tool measures the eager
backend.
"""
import contextlib
import copy
import gc
import json
import os
import signal
import threading
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from .tiny_configs import PAD, VOCAB, build_config, check_config  # noqa: E402

STAGES = ("to_device", "forward", "generate_dynamic", "generate_static", "backward")
NEW_TOKENS = 16
BATCH, SEQ = 2, 8
SEED = 0
# Gradients add up many products: a little looser than the float32 defaults.
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)


class StageTimeout(Exception):
    pass


class NotApplicable(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raises StageTimeout in the main thread after `seconds` (no-op elsewhere).

    Python code is interrupted at the next bytecode; a wait inside a C++ call is
    not, so the parent process also bounds the whole architecture."""
    usable = seconds and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise StageTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def short_error(exc, limit=300):
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ops_snapshot():
    import torchneuron

    return {name: dict(paths) for name, paths in torchneuron.executed_ops().items()}


def ops_delta(before, after, path):
    """{op: count} of the ops that ran on `path` between two snapshots."""
    delta = {}
    for name, paths in after.items():
        n = paths.get(path, 0) - before.get(name, {}).get(path, 0)
        if n > 0:
            delta[name] = n
    return dict(sorted(delta.items()))


def path_totals(before, after):
    totals = {}
    for name, paths in after.items():
        for path, n in paths.items():
            d = n - before.get(name, {}).get(path, 0)
            if d > 0:
                totals[path] = totals.get(path, 0) + d
    return dict(sorted(totals.items()))


def sync_device(device):
    """Waits for the device; raises the error of failed queued work, if any."""
    if device.startswith("neuron"):
        torch.neuron.synchronize()


def drain(device):
    """Drops an error that failed queued work left, so the next stage starts clean."""
    with contextlib.suppress(Exception):
        sync_device(device)


def make_inputs(seed=SEED):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(PAD + 3, VOCAB, (BATCH, SEQ), generator=g)
    return ids, torch.ones_like(ids)


def max_abs_diff(a, b):
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return float("inf")
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


def stage_forward(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.detach()


def generate_kwargs(model, static):
    kwargs = dict(
        max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1,
        disable_compile=True,
    )
    pad = model.generation_config.pad_token_id
    if pad is None:
        eos = model.generation_config.eos_token_id
        kwargs["pad_token_id"] = eos[0] if isinstance(eos, (list, tuple)) else (PAD if eos is None else eos)
    if static:
        kwargs["cache_implementation"] = "static"
    return kwargs


def stage_generate(model, ids, mask, static):
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, **generate_kwargs(model, static)).detach()


def stage_backward(model, ids, mask):
    model.zero_grad(set_to_none=True)
    # No cache: a training step does not need one (and RWKV updates its cached state in place).
    out = model(input_ids=ids, attention_mask=mask, labels=ids, use_cache=False)
    loss = out.loss if getattr(out, "loss", None) is not None else out.logits.float().sum()
    loss.backward()
    grads = {n: (None if p.grad is None else p.grad.detach()) for n, p in model.named_parameters() if p.requires_grad}
    return loss.detach(), grads


def compare_logits(ref, got):
    got = got.cpu()
    torch.testing.assert_close(got, ref, equal_nan=True)
    return max_abs_diff(ref, got)


def compare_tokens(ref, got):
    got = got.cpu()
    if ref.shape != got.shape:
        raise AssertionError(f"generated shapes differ: cpu {tuple(ref.shape)} vs device {tuple(got.shape)}")
    diff = (ref != got).nonzero()
    if len(diff):
        r, c = diff[0].tolist()
        raise AssertionError(
            f"{len(diff)} tokens differ; first at row {r} position {c}: cpu {int(ref[r, c])} vs device {int(got[r, c])}"
        )
    return 0.0


def compare_grads(ref, got):
    ref_loss, ref_grads = ref
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
            raise AssertionError(f"gradient of {name}: {short_error(e, 400)}") from None
        worst = max(worst, max_abs_diff(g_ref, g))
    return worst


def build_cpu_model(row):
    import transformers

    config, kwargs = build_config(row)
    problems = check_config(config)
    if problems:
        raise ValueError("config: " + "; ".join(problems))
    torch.manual_seed(SEED)
    model_class = getattr(transformers, row["causal_lm_class"])
    return model_class(config).to(torch.float32).eval(), kwargs


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


def static_not_applicable(model):
    supports = getattr(model, "_supports_default_dynamic_cache", None)
    if supports is not None and not supports():
        return f"{type(model).__name__} keeps its own cache (no Cache instances), so no static cache"
    return None


def jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


class Recorder:
    """The record of one architecture, written to `path` after every stage so that
    the parent process knows how far a worker that hung or crashed got."""

    def __init__(self, row, path=None, progress=None):
        self.path = path
        self.progress = progress or (lambda msg: None)
        self.record = dict(
            model_type=row["model_type"], causal_lm_class=row["causal_lm_class"], config_class=row["config_class"],
            passed=False, stage="build", error="", current_stage="build",
            stages={s: {"status": "not run"} for s in STAGES},
            fallback_ops=[], backward_fallback_ops=[], sync_ops={}, warm_generate_ops={},
            wall_time_s=None, peak_device_memory_bytes=None, num_parameters=None, attn_implementation=None,
            config={},
        )

    def start(self, stage):
        self.record["current_stage"] = stage
        self.progress(f"  {self.record['model_type']}: {stage}")
        self.save()

    def save(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.record, f, indent=1)
        os.replace(tmp, self.path)


def run_stage(rec, name, cpu_fn, dev_fn, compare, device, timeout, na_on_cpu_error=False):
    """Runs one stage; fills rec.record['stages'][name]. Returns the device result or None."""
    rec.start(name)
    info = rec.record["stages"][name]
    t0 = time.perf_counter()
    try:
        with time_limit(timeout):
            try:
                ref = cpu_fn()
            except StageTimeout:
                raise
            except Exception as e:
                if na_on_cpu_error:
                    raise NotApplicable(f"fails on CPU too: {short_error(e, 200)}") from None
                info.update(status="fail", error="cpu reference: " + short_error(e))
                return None
            got = dev_fn()
            sync_device(device)
            diff = compare(ref, got)
        info.update(status="pass", max_abs_diff=diff)
        return got
    except NotApplicable as e:
        info.update(status="n/a", reason=str(e))
    except Exception as e:
        info.update(status="fail", error=short_error(e))
        info["traceback"] = traceback.format_exc(limit=-6)
        drain(device)
    finally:
        info["seconds"] = round(time.perf_counter() - t0, 3)
        rec.save()
    return None


def run_architecture(row, device="neuron", stage_timeout=300.0, result_path=None, progress=None):
    """Runs every stage for one row of the architecture list; returns its record."""
    rec = Recorder(row, result_path, progress)
    r = rec.record
    t_start = time.perf_counter()
    on_neuron = device.startswith("neuron")
    if on_neuron:
        import torchneuron  # noqa: F401  (the device is normally autoloaded by torch)

        drain(device)
        torch.neuron.reset_peak_memory_stats()
    try:
        rec.start("build")
        with time_limit(stage_timeout):
            cpu_model, kwargs = build_cpu_model(row)
        r["config"] = {k: jsonable(v) for k, v in kwargs.items()}
        r["num_parameters"] = sum(p.numel() for p in cpu_model.parameters())
        r["attn_implementation"] = getattr(cpu_model.config, "_attn_implementation", None)
        rec.start("to_device")
        t0 = time.perf_counter()
        with time_limit(stage_timeout):
            dev_model, problems = move_to_device(cpu_model, device)
            sync_device(device)
        info = r["stages"]["to_device"]
        info["seconds"] = round(time.perf_counter() - t0, 3)
        if problems:
            info.update(status="fail", error=f"model.to({device!r}) untied shared parameters: " + "; ".join(problems))
        else:
            info.update(status="pass")
    except Exception as e:
        stage = r["current_stage"]
        r.update(stage=stage, error=short_error(e), wall_time_s=round(time.perf_counter() - t_start, 3))
        if stage in r["stages"]:
            r["stages"][stage] = {"status": "fail", "error": short_error(e)}
        r["build_traceback"] = traceback.format_exc(limit=-6)
        r["current_stage"] = "done"
        drain(device)
        rec.save()
        return r

    ids, mask = make_inputs()
    dev_ids, dev_mask = ids.to(device), mask.to(device)
    snap0 = ops_snapshot() if on_neuron else {}

    run_stage(
        rec, "forward", lambda: stage_forward(cpu_model, ids, mask),
        lambda: stage_forward(dev_model, dev_ids, dev_mask), compare_logits, device, stage_timeout,
    )
    got = run_stage(
        rec, "generate_dynamic", lambda: stage_generate(cpu_model, ids, mask, False),
        lambda: stage_generate(dev_model, dev_ids, dev_mask, False), compare_tokens, device, stage_timeout,
    )
    if got is not None and on_neuron:
        # A second, warm run: what still synchronizes once every signature is known.
        rec.start("generate_dynamic (warm)")
        try:
            with time_limit(stage_timeout):
                before = ops_snapshot()
                stage_generate(dev_model, dev_ids, dev_mask, False)
                sync_device(device)
                after = ops_snapshot()
            r["sync_ops"] = ops_delta(before, after, "sync")
            r["warm_generate_ops"] = path_totals(before, after)
        except Exception as e:
            r["sync_ops_error"] = short_error(e)
            drain(device)

    reason = static_not_applicable(cpu_model)
    if reason:
        rec.start("generate_static")
        r["stages"]["generate_static"] = {"status": "n/a", "reason": reason}
    else:
        run_stage(
            rec, "generate_static", lambda: stage_generate(cpu_model, ids, mask, True),
            lambda: stage_generate(dev_model, dev_ids, dev_mask, True), compare_tokens, device, stage_timeout,
            na_on_cpu_error=True,
        )
    snap1 = ops_snapshot() if on_neuron else {}
    r["fallback_ops"] = sorted(ops_delta(snap0, snap1, "cpu_copy"))

    run_stage(
        rec, "backward", lambda: stage_backward(cpu_model, ids, mask),
        lambda: stage_backward(dev_model, dev_ids, dev_mask), compare_grads, device, stage_timeout,
    )
    if on_neuron:
        r["backward_fallback_ops"] = sorted(ops_delta(snap1, ops_snapshot(), "cpu_copy"))
        r["peak_device_memory_bytes"] = int(torch.neuron.max_memory_allocated())

    failed = [s for s in STAGES if r["stages"][s]["status"] == "fail"]
    r["passed"] = not failed
    r["stage"] = failed[0] if failed else "all"
    r["error"] = r["stages"][failed[0]]["error"] if failed else ""
    r["current_stage"] = "done"
    r["wall_time_s"] = round(time.perf_counter() - t_start, 3)
    rec.save()
    del cpu_model, dev_model
    gc.collect()
    return r
