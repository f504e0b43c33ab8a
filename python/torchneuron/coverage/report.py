"""coverage.json and coverage.md."""
import json
import os
import re

from .common import EXTRA_TOKENS, PADDED_LENGTHS, STAGES
from .compile_stages import PROMPT_LEN as COMPILED_PROMPT_LEN
from .outcome import CANNOT_BUILD, CPU, DEVICE, counts, outcome

STATUS_MARK = {"pass": "pass", "fail": "FAIL", "n/a": "n/a", "not run": "-"}
RESULT = {"pass": "pass", DEVICE: "FAIL", CPU: "cpu fails", CANNOT_BUILD: "not built"}


def stage_counts(records):
    """{stage: {status: count}} over all records (build included)."""
    counts = {"build": {"pass": 0, "fail": 0}}
    for r in records:
        counts["build"]["fail" if r.get("stage") == "build" and not r.get("passed") else "pass"] += 1
    for s in STAGES:
        c = {}
        for r in records:
            status = r.get("stages", {}).get(s, {}).get("status", "not run")
            c[status] = c.get(status, 0) + 1
        counts[s] = c
    return counts


def write_json(records, meta, out_dir):
    path = os.path.join(out_dir, "coverage.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    with open(os.path.join(out_dir, "coverage_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    return path


def _cell(text, limit=None):
    text = str(text).replace("|", "\\|").replace("\n", " ").replace("`", "'")
    if limit and len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _mib(n):
    return "" if n is None else f"{n / 2**20:.1f}"


# "Qwen3ForCausalLM (model_type 'qwen3') on neuron:0: " in front of device errors (hf_integration).
_ARCH_PREFIX = re.compile(r"\w+ \(model_type '[^']*'\) on neuron(:\d+)?: ")


def _error_key(error):
    """An error message without the parts that name one model's parameters or architecture."""
    error = _ARCH_PREFIX.sub("", error, count=1)
    key = error.split(" untied shared parameters:")[0] + (" untied shared parameters" if "untied" in error else "")
    return key.split("; first at row")[0][:200]


def compiles_cell(stages):
    """"forward / first generate (recompiles) / second generate" compilations; "-" where not counted."""
    fwd, gen = stages.get("compiled_forward", {}), stages.get("compiled_generate", {})
    parts = [str(fwd.get("compilations", "-"))]
    if "compilations" in gen:
        parts.append(f"{gen['compilations']} ({gen.get('recompilations', 0)})")
    else:
        parts.append("-")
    parts.append(str(gen.get("second_call_compilations", "-")))
    return "" if parts == ["-", "-", "-"] else " / ".join(parts)


def write_markdown(records, meta, out_dir):
    path = os.path.join(out_dir, "coverage.md")
    n = len(records)
    passed = sum(1 for r in records if r.get("passed"))
    lines = ["# Hugging Face causal-LM coverage", ""]
    chosen = meta.get("stages")
    which = "every stage" if not chosen else "every stage run (" + ", ".join(f"`{s}`" for s in chosen) + ")"
    lines.append(
        f"{passed} of {n} architectures pass {which} on `{meta.get('device')}` "
        f"(torch {meta.get('torch')}, transformers {meta.get('transformers')}; "
        f"{'runs' if meta.get('merged') else 'run'} took {meta.get('wall_time_s', 0):.0f} s)."
    )
    c = counts(records)
    fallback = [r["model_type"] for r in records if r.get("passed") and r.get("fallback_ops")]
    lines += ["", f"{len(fallback)} of the {passed} that pass ran an op through the copy-to-CPU fallback"
              + (f" ({', '.join(fallback)})." if fallback else ".")]
    if passed < n:
        lines += ["", f"Of the {n - passed} others, {c[DEVICE]} fail on the device, {c[CPU]} fail in the CPU reference "
                  f"(nothing to compare with: see [CPU reference fails](#cpu-reference-fails)) and {c[CANNOT_BUILD]} "
                  "cannot be built here (a package is missing)."]
    lines += [
        "",
        "Each stage compares the device with the same model on CPU (identical weights, float32, eval mode): "
        "`to_device` (shared parameters stay shared through `model.to(device)`; the device model is re-tied "
        "after a failure so that the later stages still compare the same computation), "
        "`forward` logits (float32 tolerances), greedy generation of "
        f"{meta.get('new_tokens')} tokens with the dynamic and the static cache (tokens equal), and parameter "
        "gradients of the LM loss (`backward`: within rtol 1e-4 / atol 1e-5 of CPU's, or at most twice as far "
        "from a float64 run of the model as CPU's, since two float32 runs that sum in different orders can "
        "differ by more). Then, with "
        f"{EXTRA_TOKENS} new tokens: `generate_padded` (a batch left-padded to rows of "
        f"{'/'.join(str(n) for n in PADDED_LENGTHS)} tokens: tokens equal CPU's, and each row alone gives its "
        "batch tokens on the device wherever it does on CPU), `sample` (sampling under `torch.manual_seed`: "
        "the same seed gives the same valid tokens twice on the device; the device has its own generator, so "
        "equality with CPU is only noted), `forward_bf16` (bfloat16 logits at most twice as far from the "
        "float32 model's as CPU's bfloat16 logits with either attention implementation, plus the float32 "
        "tolerance; in a mixture-of-experts model the tokens that the device routes to other experts than "
        "CPU's bfloat16 run, a near-tie of router scores decided by one rounding step, are left out and noted, "
        "at most a quarter of them, and the other tokens are held to that limit), `sdpa_vs_eager` (models whose "
        "attention defaults to `sdpa`: the padded batch with `sdpa` and with `eager` attention each gives "
        "CPU's tokens) and `pipeline` (`pipeline(\"text-generation\", ..., device=...)` with a word-level "
        "tokenizer, two prompts in one left-padded batch: texts equal). A stage after `backward` whose CPU "
        "run fails is not applicable. Fallback ops ran through the copy-to-CPU path during forward and "
        "generation; sync ops ran on the synchronous path during a second, warm generation.",
        "",
        "The eager generation stages pass `disable_compile=True`: on a `neuron` model Transformers would "
        "otherwise `torch.compile` static-cache decoding with the Dynamo backend `\"neuron\"` (docs/compile.md). "
        "Two stages run under `torch.compile`, each from a clean Dynamo (`torch._dynamo.reset()`) and no "
        "compile records, with Dynamo's recompile limit made an error: `compiled_forward` "
        "(`torch.compile(model, backend=\"neuron\")` logits vs CPU's eager logits, float32 tolerances) and "
        f"`compiled_generate` (two greedy `generate(..., cache_implementation=\"static\")` calls of "
        f"{meta.get('new_tokens')} tokens without `disable_compile`, prompts of {COMPILED_PROMPT_LEN} tokens, "
        "shorter than the sliding window: Transformers auto-compiles the decode step with backend "
        "`\"neuron\"`; it fails if `torchneuron.compile_metrics()` stays empty, if tokens differ from CPU's "
        "eager tokens, or if the second call, with another prompt of the same length, compiles anything; "
        "not applicable where there is no static cache, the model's forward takes no cache at all, or "
        "Transformers itself compiles nothing: it decodes without a compileable cache, or its "
        "`get_compiled_call` gives the plain forward, or where the decode step hits Dynamo's recompile "
        "limit and also does on CPU under the compile settings Transformers gives neuron, `dynamic=False`, "
        "with Dynamo's backend `\"eager\"`). "
        "The compiles column counts `compile_metrics()` records: compiled_forward's, then the first "
        "generate()'s with its recompilations (records with a `recompile_reason`) in parentheses, then the "
        "second generate()'s.",
        "",
        "| stage | pass | fail | n/a | not run |",
        "| --- | --- | --- | --- | --- |",
    ]
    for stage, c in stage_counts(records).items():
        lines.append(
            f"| {stage} | {c.get('pass', 0)} | {c.get('fail', 0)} | {c.get('n/a', 0)} | {c.get('not run', 0)} |"
        )
    lines += [
        "",
        "| model_type | result | first failure | " + " | ".join(STAGES)
        + " | fallback ops | sync ops (warm) | compiles | notes | wall s | peak MiB | error |",
        "| --- | --- | --- | " + " | ".join("---" for _ in STAGES) + " | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in records:
        stages = r.get("stages", {})
        marks = [STATUS_MARK.get(stages.get(s, {}).get("status", "not run"), "?") for s in STAGES]
        sync = ", ".join(f"{k} x{v}" for k, v in (r.get("sync_ops") or {}).items())
        fallback = ", ".join(r.get("fallback_ops") or [])
        wall = r.get("wall_time_s")
        lines.append(
            "| " + " | ".join([
                _cell(r.get("model_type")), RESULT[outcome(r)[0]],
                "" if r.get("passed") else _cell(r.get("stage")), *marks, _cell(fallback, 120), _cell(sync, 160),
                compiles_cell(stages),
                _cell("; ".join(r.get("notes") or []), 160),
                "" if wall is None else f"{wall:.1f}", _mib(r.get("peak_device_memory_bytes")),
                _cell(r.get("error", ""), 200),
            ]) + " |"
        )
    groups = {}
    for r in records:
        for s in STAGES:
            info = r.get("stages", {}).get(s, {})
            if info.get("status") == "fail" and not info.get("error", "").startswith("cpu reference:"):
                groups.setdefault(_error_key(info.get("error", "")), {}).setdefault(r["model_type"], []).append(s)
    if groups:
        lines += ["", "## Distinct errors", ""]
        for key, models in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            where = ", ".join(f"{m} ({'/'.join(st)})" for m, st in models.items())
            lines.append(f"- {len(models)} architectures: `{_cell(key, 200)}` in {where}")
    for kind, title in ((CPU, "CPU reference fails"), (CANNOT_BUILD, "Cannot build here")):
        rows = [(r["model_type"], outcome(r)[1]) for r in records if outcome(r)[0] == kind]
        if rows:
            lines += ["", f"## {title}", ""]
            lines += [f"- {m}: `{_cell(reason, 300)}`" for m, reason in rows]
    na = [(r["model_type"], s, r["stages"][s].get("reason", "")) for r in records
          for s in STAGES if r.get("stages", {}).get(s, {}).get("status") == "n/a"]
    if na:
        lines += ["", "## Not applicable", ""]
        lines += [f"- {m} `{s}`: {_cell(reason, 300)}" for m, s, reason in na]
    if meta.get("merged"):
        produced = f"Merged by `{meta.get('merge_command', '')}` from the runs {meta.get('command', '')}"
    else:
        produced = f"Produced by `{meta.get('command', '')}`"
    lines += ["", f"{produced} (from the repository root, with "
              "`HF_HUB_OFFLINE=1`). The project's copy is docs/coverage.md: copy DIR/coverage.md "
              "there after a run over every causal-LM architecture (`--all-causal-lm`).", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    return path
