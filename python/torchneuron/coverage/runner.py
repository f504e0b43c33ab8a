"""Runs one architecture through the coverage stages, on CPU and on the device.

Each stage runs the CPU model first (the reference), then the same model on the
device, and compares the two (the stages are in model_stages and
generation_stages). A stage whose CPU reference fails is a failure of the setup,
not of the device, and says so ("cpu reference: ..."), except generate_static and
the stages after backward, which then become not applicable.

`stages` chooses which stages run (all by default); the build and `to_device`
always run, and an unchosen stage stays "not run".
"""
import copy
import gc
import json
import os
import time
import traceback

import torch

from .common import (
    STAGES, NotApplicable, StageTimeout, compare_logits, compare_tokens, drain, make_inputs, make_padded_inputs,
    ops_delta, ops_snapshot, path_totals, short_error, sync_device, time_limit,
)
from .compile_stages import (
    compare_compiled_forward, compare_compiled_generate, compiled_generate_not_applicable, compiled_generate_prompts,
    fresh_compile_state,
    stage_compiled_forward, stage_compiled_generate, stage_compiled_generate_reference,
)
from .generation_stages import (
    compare_padded, compare_sample, compare_sdpa_eager, compare_texts, stage_generate, stage_padded,
    stage_pipeline, stage_sample, stage_sdpa_eager, static_not_applicable,
)
from .model_stages import (
    build_cpu_model, compare_bf16, compare_grads, eager_copy, move_to_device, sdpa_not_applicable,
    stage_backward, stage_backward_reference, stage_forward, stage_forward_routed,
)
from .tiny_configs import VOCAB


def jsonable(value):
    try:
        json.dumps(value)
        return value
    except TypeError:
        return repr(value)


class Recorder:
    """The record of one architecture, written to `path` after every stage so that
    the parent process knows how far a worker that hung or crashed got."""

    def __init__(self, row, path=None, progress=None, stages=None):
        self.path = path
        self.selected = set(STAGES if stages is None else stages)
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
    With a not_applicable reason the stage is recorded as n/a without running; a stage
    that was not chosen stays "not run"."""
    if name not in rec.selected:
        return None
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
        logits, routing = stage_forward_routed(bf16["cpu"], ids, mask)
        return logits, stage_forward(cpu_model, ids, mask), eager, routing

    def dev_bf16():
        model, _ = move_to_device(bf16["cpu"], device)
        return stage_forward_routed(model, ids.to(device), mask.to(device))

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


def run_compiled_stages(rec, cpu_model, dev_model, ids, mask, device, timeout):
    """compiled_forward and compiled_generate; the compile counts are recorded pass or fail."""
    stages = rec.record["stages"]
    counts = {}
    run_stage(
        rec, "compiled_forward", lambda: stage_forward(cpu_model, ids, mask),
        lambda: stage_compiled_forward(dev_model, ids.to(device), mask.to(device), counts),
        compare_compiled_forward(counts), device, timeout,
    )
    stages["compiled_forward"].update(counts)
    counts = {}
    prompts = compiled_generate_prompts()
    run_stage(
        rec, "compiled_generate", lambda: stage_compiled_generate_reference(cpu_model, prompts),
        lambda: stage_compiled_generate(dev_model, prompts, counts, cpu_model=cpu_model), compare_compiled_generate(counts), device,
        timeout, na_on_cpu_error=True,
        not_applicable=static_not_applicable(cpu_model) or compiled_generate_not_applicable(cpu_model),
    )
    stages["compiled_generate"].update(counts)
    if rec.selected & {"compiled_forward", "compiled_generate"}:
        fresh_compile_state()  # frees the compiled graphs (and their references to the model)
        rec.save()


def notes(stages):
    """What passing stages found worth knowing (informational, never a failure)."""
    out = []
    if stages.get("generate_padded", {}).get("padding_changes_cpu_tokens"):
        out.append("left padding changes the tokens on CPU too")
    if stages.get("sample", {}).get("matches_cpu") is False:
        out.append("sampled tokens differ from CPU's under the same seed")
    if stages.get("sdpa_vs_eager", {}).get("cpu_sdpa_equals_eager") is False:
        out.append("sdpa and eager tokens differ on CPU too")
    bf16 = stages.get("forward_bf16", {})
    if bf16.get("status") == "pass" and bf16.get("excluded_tokens"):
        n = bf16["excluded_tokens"]
        out.append(f"forward_bf16 left out {n} token{'s' if n > 1 else ''} routed to other experts than on CPU")
    return out


def run_architecture(row, device="neuron", stage_timeout=300.0, result_path=None, progress=None, stages=None):
    """Runs the stages (all, or those named in `stages`) for one row of the architecture
    list; returns its record."""
    rec = Recorder(row, result_path, progress, stages)
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
        rec, "backward", lambda: stage_backward_reference(cpu_model, ids, mask),
        lambda: stage_backward(dev_model, dev_ids, dev_mask), compare_grads, device, stage_timeout,
    )
    snap2 = ops_snapshot() if on_neuron else {}
    r["backward_fallback_ops"] = sorted(ops_delta(snap1, snap2, "cpu_copy"))
    for m in (cpu_model, dev_model):
        m.zero_grad(set_to_none=True)

    run_extra_stages(rec, cpu_model, dev_model, device, stage_timeout)
    if on_neuron:
        r["fallback_ops"] = sorted(set(r["fallback_ops"]) | set(ops_delta(snap2, ops_snapshot(), "cpu_copy")))
    run_compiled_stages(rec, cpu_model, dev_model, ids, mask, device, stage_timeout)
    if on_neuron:
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
