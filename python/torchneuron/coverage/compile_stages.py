"""compiled_forward and compiled_generate: the model under `torch.compile` with the
Dynamo backend "neuron", compared with CPU's eager results.

Each stage starts from a clean Dynamo (`torch._dynamo.reset()`) and no compile
records (`torchneuron.reset_compile_metrics()`), so the counts it records belong to
this architecture and this stage. Dynamo's recompile limit is made an error
(`fail_on_recompile_limit_hit`): past it Dynamo would otherwise run the frame
eagerly without a word, and the stage would pass without compiling.
"""
import inspect

import torch

from .common import NotApplicable, compare_logits, compare_tokens, make_inputs
from .generation_stages import stage_generate
from .model_stages import stage_forward

SECOND_PROMPT_SEED = 2  # another prompt of the same shape
# Shorter than the tiny configs' sliding window (8): decoding first fills a
# sliding-window cache, then slides, two regimes that must each compile once.
PROMPT_LEN = 5


def fresh_compile_state():
    import torchneuron

    torch._dynamo.reset()
    torchneuron.reset_compile_metrics()


def compile_counts(records):
    """(compilations, recompilations, recompile reasons) of compile_metrics() records."""
    reasons = [r["recompile_reason"] for r in records if r.get("recompile_reason")]
    return len(records), len(reasons), reasons


def stage_compiled_forward(model, ids, mask, counts):
    """Logits of `torch.compile(model, backend="neuron")`; fills `counts` with the compilations."""
    import torchneuron

    fresh_compile_state()
    compiled = torch.compile(model, backend="neuron")
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        logits = stage_forward(compiled, ids, mask)
    counts["compilations"], counts["recompilations"], _ = compile_counts(torchneuron.compile_metrics())
    return logits


def compare_compiled_forward(counts):
    def compare(ref, got):
        if not counts.get("compilations"):
            raise AssertionError('torch.compile(model, backend="neuron") compiled nothing (compile_metrics() is empty)')
        return compare_logits(ref, got)

    return compare


def compiled_generate_not_applicable(model):
    """A model whose forward takes no cache recomputes the whole sequence every decode
    step: each step has a new input length, so a new graph, whatever the cache."""
    from transformers.generation.utils import ALL_CACHE_NAMES  # past_key_values, cache_params, ...

    if not set(ALL_CACHE_NAMES) & set(inspect.signature(model.forward).parameters):
        return (f"{type(model).__name__}.forward takes no cache: every decode step reruns the whole, "
                "longer sequence (a new graph per step)")
    return None


def compiled_generate_prompts():
    """Two prompts of the same shape: the second generate() must reuse every compiled graph."""
    return [(ids[:, :PROMPT_LEN], mask[:, :PROMPT_LEN])
            for ids, mask in (make_inputs(), make_inputs(seed=SECOND_PROMPT_SEED))]


def stage_compiled_generate_reference(model, prompts):
    """CPU's eager greedy tokens with the static cache, for both prompts."""
    return [stage_generate(model, ids, mask, True) for ids, mask in prompts]


def recompiles_on_cpu_too(cpu_model, prompts):
    """Whether Transformers' decode compile with the config it gives a neuron model
    (`dynamic=False`, as for TPU) hits Dynamo's recompile limit on CPU as well, with
    the backend "eager" (Dynamo's graphs run as they are): then the model itself
    changes a shape every step, whatever the device."""
    from transformers import CompileConfig

    config = CompileConfig(backend="eager", dynamic=False, mode="default")
    config._compile_all_devices = True  # Transformers auto-compiles only accelerators
    torch._dynamo.reset()
    try:
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            for ids, mask in prompts:
                stage_generate(cpu_model, ids, mask, True, disable_compile=False, compile_config=config)
    except torch._dynamo.exc.FailOnRecompileLimitHit:
        return True
    finally:
        torch._dynamo.reset()
    return False


def stage_compiled_generate(model, prompts, counts, cpu_model=None):
    """Greedy static-cache generate() under Transformers' auto-compile (no
    `disable_compile`): on a neuron model it compiles the decode step with
    `CompileConfig(backend="neuron")`. Fills `counts` per call (the first call's
    compilations, of which recompilations; the second call's). A model that hits
    Dynamo's recompile limit is not applicable if `cpu_model` hits it too under the
    same compile settings on CPU (recompiles_on_cpu_too)."""
    import torchneuron

    fresh_compile_state()
    device = model.device
    out = []
    _record_auto_compile_cache(model, counts)
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for i, (ids, mask) in enumerate(prompts):
            try:
                tokens = stage_generate(model, ids.to(device), mask.to(device), True, disable_compile=False)
            except torch._dynamo.exc.FailOnRecompileLimitHit as e:
                # Which guard kept failing: the last recompilation's reason.
                n, r, reasons = compile_counts(torchneuron.compile_metrics())
                counts.update(compilations=n, recompilations=r, recompile_reasons=reasons)
                last = reasons[-1] if reasons else "no recompile reason recorded"
                if cpu_model is not None and recompiles_on_cpu_too(cpu_model, prompts):
                    raise NotApplicable(
                        f"the decode step recompiles every step under Transformers' compile settings for "
                        f"neuron (dynamic=False, as for TPU) on CPU too, with Dynamo's backend 'eager'; "
                        f"here: {last}") from None
                raise AssertionError(f"generate() call {i + 1} hit Dynamo's recompile limit after {n} compilations; "
                                     f"last recompile reason: {last}") from e
            out.append(tokens.cpu())
            records = torchneuron.compile_metrics()
            if i == 0:
                counts["compilations"], counts["recompilations"], counts["recompile_reasons"] = compile_counts(records)
                first = len(records)
            else:
                counts["second_call_compilations"] = len(records) - first
                counts["second_call_recompile_reasons"] = compile_counts(records[first:])[2]
    compile_config = getattr(model, "_last_compile_config", None)
    counts["compile_backend"] = getattr(compile_config, "backend", None)
    return out


def _record_auto_compile_cache(model, counts):
    """Notes in `counts` the cache generate() decoded with, when Transformers decides
    whether to auto-compile (`_valid_auto_compile_criteria`), and whether its
    `get_compiled_call` returned a compiled call: a model for which it ignores
    `cache_implementation="static"`, or never compiles, has nothing to compile on any
    device."""
    decide = type(model)._valid_auto_compile_criteria

    def criteria(self, model_kwargs, generation_config):
        cache = model_kwargs.get("past_key_values", model_kwargs.get("cache_params"))
        counts["auto_compile_cache"] = type(cache).__name__ if cache is not None else None
        counts["auto_compile_cache_compileable"] = bool(getattr(cache, "is_compileable", False))
        counts["auto_compile_decided"] = decide(self, model_kwargs, generation_config)
        return counts["auto_compile_decided"]

    model._valid_auto_compile_criteria = criteria.__get__(model)
    compiled_call = type(model).get_compiled_call

    def get_compiled_call(self, compile_config):
        call = compiled_call(self, compile_config)
        # Transformers returns the plain call for some models on every device (llama4).
        counts["auto_compile_uncompiled_call"] = call == self.__call__
        return call

    model.get_compiled_call = get_compiled_call.__get__(model)


def compare_compiled_generate(counts):
    """The decode step was compiled in the first call, tokens equal CPU's for both
    prompts, and the second call compiled nothing. Not applicable when Transformers
    decoded without a compileable cache although the static one was asked for, or
    its get_compiled_call gave the uncompiled forward."""
    def compare(ref, got):
        if not counts.get("compilations") and "auto_compile_cache" in counts \
                and not counts["auto_compile_cache_compileable"]:
            raise NotApplicable(
                f"Transformers decoded with {counts['auto_compile_cache'] or 'no cache'}, not a compileable "
                f'cache, although cache_implementation="static" was asked for: nothing to auto-compile')
        if not counts.get("compilations") and counts.get("auto_compile_uncompiled_call"):
            raise NotApplicable("Transformers' get_compiled_call returns the uncompiled forward for this model "
                                "on every device: nothing to auto-compile")
        if not counts.get("compilations"):
            backend = counts.get("compile_backend")
            why = (f"get_compiled_call used backend {backend!r}" if backend else
                   "Transformers did not call get_compiled_call")
            if counts.get("auto_compile_cache"):
                why += (f"; it decoded with a {counts['auto_compile_cache']} and _valid_auto_compile_criteria "
                        f"returned {counts.get('auto_compile_decided')}")
            raise AssertionError(f"generate() did not auto-compile: compile_metrics() is empty ({why})")
        for i, (r, g) in enumerate(zip(ref, got)):
            try:
                compare_tokens(r, g)
            except AssertionError as e:
                raise AssertionError(f"generate() call {i + 1}: {e}") from None
        again = counts.get("second_call_compilations", 0)
        if again:
            reasons = "; ".join(counts.get("second_call_recompile_reasons") or []) or "no recompile reason recorded"
            raise AssertionError(f"the second generate() with a prompt of the same length compiled {again} more "
                                 f"graph(s): {reasons}")
        return 0.0

    return compare
