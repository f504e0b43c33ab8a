"""Runs one architecture through the coverage stages, on CPU and on the device.

Each stage runs the CPU model first (the reference) and then the same model on
the device, and compares:

- forward: logits of one batch (float32 tolerances of `torch.testing.assert_close`);
- generate_dynamic: greedy decoding of NEW_TOKENS tokens with the default dynamic
  cache (tokens equal);
- generate_static: the same with `cache_implementation="static"` (tokens equal); not
  applicable where the model takes no Cache instances (Transformers'
  `_supports_default_dynamic_cache()`) or the CPU run itself fails;
- backward: gradients of the language-modelling loss for every parameter;
- generate_padded: greedy decoding of EXTRA_TOKENS tokens for a left-padded batch
  (rows of PADDED_LENGTHS tokens): tokens equal CPU's, and each row generated
  alone on the device gives that row's tokens, wherever it does on CPU (where it
  does not, e.g. in RWKV, which ignores the attention mask, a note says so);
- sample: sampling under `torch.manual_seed`: the same seed gives the same
  tokens twice on the device, and they are in the vocabulary. The device has its
  own generator, so equality with CPU's tokens is only recorded (`matches_cpu`);
- forward_bf16: the model in bfloat16 on both sides; the device's logits must be
  about as close to the float32 model's as CPU's: at most twice CPU's largest
  error (with its default attention or, for sdpa models, eager attention,
  whichever is larger), plus the float32 tolerance. The device may round
  differently (it has its own attention kernel), and in mixture-of-experts
  models a rounding difference can pick another expert, on CPU as well;
- sdpa_vs_eager: for models whose attention defaults to "sdpa", greedy tokens of
  the padded batch with "sdpa" and with "eager" attention each equal CPU's, so the
  two agree on the device wherever they agree on CPU; not applicable otherwise;
- pipeline: `pipeline("text-generation", model=..., tokenizer=..., device=...)`
  with a word-level tokenizer over the tiny vocabulary, a left-padded batch of two
  prompts: generated texts equal CPU's.

Before them, `to_device` checks that `model.to(device)` keeps shared (tied)
parameters shared; where it does not, the device model is re-tied so that the
other stages still compare the same computation.

A stage whose CPU reference fails is a failure of the setup, not of the device,
and says so ("cpu reference: ..."), except generate_static and the stages after
backward, which then become not applicable. Generation runs with
`disable_compile=True`: with a static cache on a `neuron` device Transformers
(5.x) `torch.compile`s the decoding step with the Dynamo backend "neuron"
(`PreTrainedModel._default_compile_config`), which does not exist yet, so without
it static-cache generation fails with torch's InvalidBackend error.
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

STAGES = (
    "to_device", "forward", "generate_dynamic", "generate_static", "backward",
    "generate_padded", "sample", "forward_bf16", "sdpa_vs_eager", "pipeline",
)
NEW_TOKENS = 16
EXTRA_TOKENS = 8  # for the stages after backward: shorter, to keep each architecture quick
BATCH, SEQ = 2, 8
PADDED_LENGTHS = (SEQ, SEQ - 3, SEQ - 6)
PROMPTS = ("t10 t20 t30 t40 t50 t60", "t70 t80 t90")
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


def make_padded_inputs(seed=SEED + 1):
    """(rows, ids, mask): rows of PADDED_LENGTHS tokens, left-padded with PAD."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(PAD + 3, VOCAB, (n,), generator=g) for n in PADDED_LENGTHS]
    ids = torch.full((len(rows), SEQ), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, SEQ - len(row):] = row
        mask[i, SEQ - len(row):] = 1
    return rows, ids, mask


_tokenizer = None


def tokenizer():
    """A word-level tokenizer over the tiny vocabulary ("<pad>" "<s>" "</s>" "<unk>" "t4" ... "t255"),
    built in memory: the coverage run downloads nothing."""
    global _tokenizer
    if _tokenizer is None:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast

        words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(4, VOCAB)]
        tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.WordPiece(prefix="##")
        _tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
            padding_side="left",
        )
    return _tokenizer


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


def stage_generate(model, ids, mask, static, **overrides):
    kwargs = {**generate_kwargs(model, static), **overrides}
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, **kwargs).detach()


def extra_generate(model, ids, mask, **overrides):
    """Greedy (unless overridden) decoding of EXTRA_TOKENS tokens with the dynamic cache."""
    device = model.device
    return stage_generate(model, ids.to(device), mask.to(device), False,
                          max_new_tokens=EXTRA_TOKENS, min_new_tokens=EXTRA_TOKENS, **overrides).cpu()


def stage_padded(model, padded):
    rows, ids, mask = padded
    batch = extra_generate(model, ids, mask)
    alone = [extra_generate(model, row[None], torch.ones_like(row[None])) for row in rows]
    return batch, alone


def compare_padded(ref, got):
    (ref_batch, ref_alone), (batch, alone) = ref, got
    compare_tokens(ref_batch, batch)
    # Rows alone vs the padded batch, on the device, wherever CPU's agree.
    cpu_agrees = [torch.equal(ref_batch[i, -EXTRA_TOKENS:], a[0, -EXTRA_TOKENS:]) for i, a in enumerate(ref_alone)]
    for i, a in enumerate(alone):
        own, in_batch = a[0, -EXTRA_TOKENS:], batch[i, -EXTRA_TOKENS:]
        if cpu_agrees[i] and not torch.equal(own, in_batch):
            raise AssertionError(f"row {i} generated alone differs from its padded-batch tokens on the device "
                                 f"(equal on CPU): {own.tolist()} vs {in_batch.tolist()}")
    return 0.0, {"padding_changes_cpu_tokens": not all(cpu_agrees)}


def stage_sample(model, ids, mask, twice):
    def once():
        torch.manual_seed(SEED)
        return extra_generate(model, ids, mask, do_sample=True)

    return (once(), once()) if twice else once()


def compare_sample(vocab):
    def compare(ref, got):
        first, second = got
        if ref.shape != first.shape:
            raise AssertionError(f"sampled shapes differ: cpu {tuple(ref.shape)} vs device {tuple(first.shape)}")
        if not torch.equal(first, second):
            raise AssertionError("the same seed sampled different tokens on the device: "
                                 f"{first[:, SEQ:].tolist()} vs {second[:, SEQ:].tolist()}")
        new = first[:, SEQ:]
        if new.numel() and (int(new.min()) < 0 or int(new.max()) >= vocab):
            raise AssertionError(f"sampled tokens outside the vocabulary of {vocab}: {new.tolist()}")
        return 0.0, {"matches_cpu": bool(torch.equal(ref, first))}

    return compare


def compare_bf16(ref, got):
    ref_bf16, exact, ref_eager = ref
    got = got.cpu()
    if got.dtype != ref_bf16.dtype:  # bfloat16, or float32 for models that upcast their logits
        raise AssertionError(f"device logits are {got.dtype}, CPU's {ref_bf16.dtype}")
    device_error, cpu_error = max_abs_diff(exact, got), max_abs_diff(exact, ref_bf16)
    extra = {"cpu_error": cpu_error}
    # CPU's bfloat16 error with either attention: a router that picks experts by comparing
    # scores (phimoe) turns a rounding difference into a different expert on CPU as well.
    noise = cpu_error
    if ref_eager is not None:
        extra["cpu_eager_error"] = max_abs_diff(exact, ref_eager)
        noise = max(noise, extra["cpu_eager_error"])
    # Twice that, plus the float32 tolerance of the forward stage.
    limit = 2 * noise + 1e-5
    if not device_error <= limit:
        raise AssertionError(f"bfloat16 logits on the device are {device_error:.3g} from the float32 model's, "
                             f"CPU's are {cpu_error:.3g} (limit {limit:.3g})")
    return device_error, extra


def compare_sdpa_eager(ref, got):
    (ref_sdpa, ref_eager), (sdpa, eager) = ref, got
    try:
        compare_tokens(ref_eager, eager)
    except AssertionError as e:
        raise AssertionError(f"eager: {e}") from None
    try:
        compare_tokens(ref_sdpa, sdpa)
    except AssertionError as e:
        raise AssertionError(f"sdpa: {e}") from None
    return 0.0, {"sdpa_equals_eager": bool(torch.equal(sdpa, eager)),
                 "cpu_sdpa_equals_eager": bool(torch.equal(ref_sdpa, ref_eager))}


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


def stage_sdpa_eager(model, padded):
    _, ids, mask = padded
    return extra_generate(model, ids, mask), extra_generate(eager_copy(model), ids, mask)


def stage_pipeline(model, device):
    from transformers import pipeline

    pipe = pipeline("text-generation", model=model, tokenizer=tokenizer(), device=device)
    if pipe.model.device.type != torch.device(device).type:
        raise AssertionError(f"the pipeline runs on {pipe.model.device}, not {device}")
    out = pipe(list(PROMPTS), batch_size=len(PROMPTS), max_new_tokens=EXTRA_TOKENS, min_new_tokens=EXTRA_TOKENS,
               do_sample=False)
    return [o[0]["generated_text"] for o in out]


def compare_texts(ref, got):
    for i, (a, b) in enumerate(zip(ref, got)):
        if a != b:
            raise AssertionError(f"prompt {i}: cpu {a!r} vs device {b!r}")
    if len(ref) != len(got):
        raise AssertionError(f"{len(ref)} texts on cpu, {len(got)} on the device")
    return 0.0


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
            fallback_ops=[], backward_fallback_ops=[], sync_ops={}, warm_generate_ops={}, notes=[],
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


def run_stage(rec, name, cpu_fn, dev_fn, compare, device, timeout, na_on_cpu_error=False,
              not_applicable=None):
    """Runs one stage; fills rec.record['stages'][name]. Returns the device result or None.
    With a not_applicable reason the stage is recorded as n/a without running."""
    rec.start(name)
    if not_applicable:
        rec.record["stages"][name] = {"status": "n/a", "reason": not_applicable}
        return None
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
        extra = {}
        if isinstance(diff, tuple):
            diff, extra = diff
        info.update(status="pass", max_abs_diff=diff, **extra)
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


def run_extra_stages(rec, cpu_model, dev_model, device, timeout):
    """generate_padded, sample, forward_bf16, sdpa_vs_eager and pipeline (a CPU failure makes each n/a)."""
    padded = make_padded_inputs()
    ids, mask = make_inputs()
    text = cpu_model.config.get_text_config(decoder=True) if hasattr(cpu_model.config, "get_text_config") else None
    vocab = getattr(text or cpu_model.config, "vocab_size", None) or VOCAB
    run_stage(
        rec, "generate_padded", lambda: stage_padded(cpu_model, padded), lambda: stage_padded(dev_model, padded),
        compare_padded, device, timeout, na_on_cpu_error=True,
    )
    run_stage(
        rec, "sample", lambda: stage_sample(cpu_model, ids, mask, False),
        lambda: stage_sample(dev_model, ids, mask, True), compare_sample(vocab), device, timeout,
        na_on_cpu_error=True,
    )
    bf16 = {}

    def cpu_bf16():
        bf16["cpu"] = copy.deepcopy(cpu_model).to(torch.bfloat16)
        eager = None if sdpa_not_applicable(cpu_model) else stage_forward(eager_copy(bf16["cpu"]), ids, mask)
        return stage_forward(bf16["cpu"], ids, mask), stage_forward(cpu_model, ids, mask), eager

    def dev_bf16():
        model, _ = move_to_device(bf16["cpu"], device)
        return stage_forward(model, ids.to(device), mask.to(device))

    run_stage(rec, "forward_bf16", cpu_bf16, dev_bf16, compare_bf16, device, timeout, na_on_cpu_error=True)
    bf16.clear()

    run_stage(
        rec, "sdpa_vs_eager", lambda: stage_sdpa_eager(cpu_model, padded),
        lambda: stage_sdpa_eager(dev_model, padded), compare_sdpa_eager, device, timeout, na_on_cpu_error=True,
        not_applicable=sdpa_not_applicable(cpu_model),
    )
    # Last: the pipeline may change the models' generation configs.
    run_stage(
        rec, "pipeline", lambda: stage_pipeline(cpu_model, "cpu"), lambda: stage_pipeline(dev_model, device),
        compare_texts, device, timeout, na_on_cpu_error=True,
    )


def notes(stages):
    """What passing stages found worth knowing (informational, never a failure)."""
    out = []
    if stages.get("generate_padded", {}).get("padding_changes_cpu_tokens"):
        out.append("left padding changes the tokens on CPU too")
    if stages.get("sample", {}).get("matches_cpu") is False:
        out.append("sampled tokens differ from CPU's under the same seed")
    if stages.get("sdpa_vs_eager", {}).get("cpu_sdpa_equals_eager") is False:
        out.append("sdpa and eager tokens differ on CPU too")
    return out


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

    run_stage(
        rec, "generate_static", lambda: stage_generate(cpu_model, ids, mask, True),
        lambda: stage_generate(dev_model, dev_ids, dev_mask, True), compare_tokens, device, stage_timeout,
        na_on_cpu_error=True, not_applicable=static_not_applicable(cpu_model),
    )
    snap1 = ops_snapshot() if on_neuron else {}
    r["fallback_ops"] = sorted(ops_delta(snap0, snap1, "cpu_copy"))

    run_stage(
        rec, "backward", lambda: stage_backward(cpu_model, ids, mask),
        lambda: stage_backward(dev_model, dev_ids, dev_mask), compare_grads, device, stage_timeout,
    )
    snap2 = ops_snapshot() if on_neuron else {}
    r["backward_fallback_ops"] = sorted(ops_delta(snap1, snap2, "cpu_copy"))
    for m in (cpu_model, dev_model):
        m.zero_grad(set_to_none=True)

    run_extra_stages(rec, cpu_model, dev_model, device, stage_timeout)
    if on_neuron:
        r["fallback_ops"] = sorted(set(r["fallback_ops"]) | set(ops_delta(snap2, ops_snapshot(), "cpu_copy")))
        r["peak_device_memory_bytes"] = int(torch.neuron.max_memory_allocated())
    r["notes"] = notes(r["stages"])

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
