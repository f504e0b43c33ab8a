"""The Hugging Face coverage tool (python -m torchneuron.coverage) on small architectures:
every stage for two listed ones and one of Transformers' causal-LM auto mapping, the
torch.compile stages alone (--stages) for two sliding-window ones; the tiny-config builder
over the config of every architecture of the auto mapping (no model run); forward_bf16's
per-token comparison of mixture-of-experts models on synthetic routing records."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")

ROWS = [
    ("llama", "LlamaForCausalLM", "LlamaConfig", "baseline dense GQA + RoPE"),
    ("qwen2", "Qwen2ForCausalLM", "Qwen2Config", "q/k/v bias; sliding window"),
]
STAGES = ["to_device", "forward", "generate_dynamic", "generate_static", "backward",
          "generate_padded", "sample", "forward_bf16", "sdpa_vs_eager", "pipeline",
          "compiled_forward", "compiled_generate"]
COMPILED = ["compiled_forward", "compiled_generate"]
# Sliding-window models whose decoding overflows the window (the tiny configs' window is 8).
SLIDING_ROWS = [
    ("mistral", "MistralForCausalLM", "MistralConfig", "sliding_window"),
    ("gemma2", "Gemma2ForCausalLM", "Gemma2Config", "alternating sliding-window layers"),
]


def run_tool(root, rows, *extra, timeout=240):
    tsv = root / "architectures.tsv"
    lines = ["model_type\tcausal_lm_class\tconfig_class\tspecial_needs"] + ["\t".join(r) for r in rows]
    tsv.write_text("\n".join(lines) + "\n")
    out = root / "out"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.coverage", "--list", str(tsv), "--out", str(out), "--device", "neuron",
         "--stage-timeout", "120", *extra],
        capture_output=True, text=True, timeout=timeout, env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_tool(tmp_path_factory.mktemp("coverage"), ROWS)


@pytest.fixture(scope="module")
def compiled_report(tmp_path_factory):
    return run_tool(tmp_path_factory.mktemp("coverage_compiled"), SLIDING_ROWS, "--stages", ",".join(COMPILED),
                    timeout=180)


def test_progress_is_printed_per_architecture(report):
    proc, _ = report
    for model_type, *_ in ROWS:
        assert f"{model_type}: pass" in proc.stdout, proc.stdout


def test_json_records(report):
    _, out = report
    records = json.loads((out / "coverage.json").read_text())
    assert [r["model_type"] for r in records] == [r[0] for r in ROWS]
    for r in records:
        for key in ("model_type", "passed", "stage", "error", "fallback_ops", "sync_ops", "wall_time_s",
                    "peak_device_memory_bytes", "stages", "notes"):
            assert key in r, key
        assert r["passed"] is True, r
        assert r["stage"] == "all" and r["error"] == ""
        assert isinstance(r["fallback_ops"], list) and isinstance(r["sync_ops"], dict)
        assert r["wall_time_s"] > 0 and r["peak_device_memory_bytes"] > 0
        assert list(r["stages"]) == STAGES
        assert all(r["stages"][s]["status"] == "pass" for s in STAGES), r["stages"]
        # What the extra stages record besides pass/fail.
        assert r["stages"]["generate_padded"]["padding_changes_cpu_tokens"] is False
        assert isinstance(r["stages"]["sample"]["matches_cpu"], bool)
        assert r["stages"]["forward_bf16"]["cpu_error"] > 0
        assert r["stages"]["sdpa_vs_eager"]["sdpa_equals_eager"] is True
        assert r["attn_implementation"] == "sdpa"
        # Compiled: each call of the model compiled, nothing compiled again in the second generate().
        assert r["stages"]["compiled_forward"]["compilations"] >= 1
        generate = r["stages"]["compiled_generate"]
        assert generate["compilations"] >= 1 and generate["second_call_compilations"] == 0, generate
        assert generate["compile_backend"] == "neuron"
    assert records[0]["stages"]["compiled_generate"]["compilations"] == 1  # dense llama: one decode graph


def test_markdown_table(report):
    _, out = report
    md = (out / "coverage.md").read_text()
    assert "2 of 2 architectures pass" in md
    header = next(line for line in md.splitlines() if line.startswith("| model_type"))
    for column in STAGES + ["fallback ops", "notes", "error"]:
        assert column in header
    assert "disable_compile=True" in md and "docs/compile.md" in md  # the torch.compile situation
    assert "compiles" in header
    rows = [line for line in md.splitlines() if line.startswith(("| llama ", "| qwen2 "))]
    assert len(rows) == 2 and all("| pass |" in line for line in rows)
    assert "| 1 / 1 (0) / 0 |" in rows[0], rows[0]  # llama: forward once, decode once, second call nothing


def test_compiled_stages_run_alone_on_sliding_window_models(compiled_report):
    """--stages runs the torch.compile stages alone. A sliding-window cache meets two regimes in
    the first generate() (filling, then full), each compiled once; the second compiles nothing."""
    proc, out = compiled_report
    records = json.loads((out / "coverage.json").read_text())
    assert [r["model_type"] for r in records] == [r[0] for r in SLIDING_ROWS]
    for r in records:
        assert r["passed"] is True, r
        assert r["stages"]["to_device"]["status"] == "pass"
        assert {s for s in STAGES if r["stages"][s]["status"] == "not run"} == set(STAGES) - {"to_device", *COMPILED}
        assert r["stages"]["compiled_forward"]["status"] == "pass", r["stages"]["compiled_forward"]
        generate = r["stages"]["compiled_generate"]
        assert generate["status"] == "pass", generate
        assert (generate["compilations"], generate["recompilations"], generate["second_call_compilations"]) == (2, 1, 0)
        assert "cumulative_length_int" in generate["recompile_reasons"][0]  # the window's fill level
    md = (out / "coverage.md").read_text()
    assert "2 of 2 architectures pass every stage run (`compiled_forward`, `compiled_generate`)" in md
    assert json.loads((out / "coverage_meta.json").read_text())["stages"] == COMPILED


def test_unknown_stage_is_refused_naming_the_stages(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.coverage", "--list", MORE, "--out", str(tmp_path), "--stages",
         "compiled_forward,compiled_generat"], capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "--stages: unknown stage(s) compiled_generat; the stages are to_device, forward" in proc.stderr
    assert not (tmp_path / "coverage.json").exists()


def test_compiled_generate_fails_without_compilation_or_with_a_second_call_recompiling():
    import torch

    from torchneuron.coverage.compile_stages import compare_compiled_generate

    tokens = [torch.tensor([[5, 6, 7]]), torch.tensor([[8, 9, 10]])]
    ok = dict(compilations=1, recompilations=0, second_call_compilations=0, second_call_recompile_reasons=[])
    assert compare_compiled_generate(ok)(tokens, [t.clone() for t in tokens]) == 0.0
    with pytest.raises(AssertionError, match="did not auto-compile: compile_metrics\\(\\) is empty"):
        compare_compiled_generate({})(tokens, tokens)
    with pytest.raises(AssertionError, match="generate\\(\\) call 2: 1 tokens differ; first at row 0 position 2"):
        compare_compiled_generate(ok)(tokens, [tokens[0], torch.tensor([[8, 9, 11]])])
    again = dict(ok, second_call_compilations=1, second_call_recompile_reasons=["0/1: size mismatch"])
    with pytest.raises(AssertionError, match="second generate\\(\\) .* compiled 1 more graph\\(s\\): 0/1: size mismatch"):
        compare_compiled_generate(again)(tokens, tokens)
    # Transformers itself compiled nothing: a cache it cannot compile (mpt ignores the
    # static one), or get_compiled_call giving the plain forward (llama4): not applicable.
    from torchneuron.coverage.common import NotApplicable
    with pytest.raises(NotApplicable, match="decoded with no cache, not a compileable cache"):
        compare_compiled_generate(dict(auto_compile_cache=None, auto_compile_cache_compileable=False))(tokens, tokens)
    with pytest.raises(NotApplicable, match="get_compiled_call returns the uncompiled forward"):
        compare_compiled_generate(dict(auto_compile_cache="StaticCache", auto_compile_cache_compileable=True,
                                       auto_compile_uncompiled_call=True))(tokens, tokens)
    with pytest.raises(AssertionError, match="decoded with a StaticCache and _valid_auto_compile_criteria returned "
                                             "False"):
        compare_compiled_generate(dict(auto_compile_cache="StaticCache", auto_compile_cache_compileable=True,
                                       auto_compile_decided=False))(tokens, tokens)


def test_one_failing_architecture_does_not_stop_the_run(tmp_path):
    tsv = tmp_path / "list.tsv"
    tsv.write_text(
        "model_type\tcausal_lm_class\tconfig_class\tspecial_needs\n"
        "nonexistent\tNoSuchForCausalLM\tNoSuchConfig\t-\n"
        "llama\tLlamaForCausalLM\tLlamaConfig\t-\n"
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.coverage", "--list", str(tsv), "--out", str(out), "--in-process",
         "--only", "nonexistent,llama"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = {r["model_type"]: r for r in json.loads((out / "coverage.json").read_text())}
    assert records["nonexistent"]["passed"] is False and records["nonexistent"]["stage"] == "build"
    assert "NoSuchConfig" in records["nonexistent"]["error"]
    assert records["llama"]["passed"] is True


def test_distinct_errors_group_across_architectures(tmp_path):
    # Device errors name the architecture in front (hf_integration); the report groups them without it.
    from torchneuron.coverage import report
    from torchneuron.coverage.common import STAGES as TOOL_STAGES

    def failed(model_type, cls):
        stages = {s: {"status": "pass"} for s in TOOL_STAGES}
        error = (f"TypeError: {cls} (model_type '{model_type}') on neuron:0: "
                 "empty_strided: dtype UInt32 is not supported")
        stages["forward"] = {"status": "fail", "error": error}
        return dict(model_type=model_type, passed=False, stage="forward", error=error, stages=stages)

    records = [failed("llama", "LlamaForCausalLM"), failed("qwen2", "Qwen2ForCausalLM")]
    md = open(report.write_markdown(records, {"device": "neuron", "new_tokens": 16}, str(tmp_path))).read()
    assert "- 2 architectures: `TypeError: empty_strided: dtype UInt32 is not supported`" in md, md


def test_gradients_are_judged_against_float64_when_float32_runs_differ():
    import torch

    from torchneuron.coverage.model_stages import compare_grads

    exact = torch.tensor([0.1, 5.0], dtype=torch.float64)
    cpu = torch.tensor([0.1 + 3e-5, 5.0], dtype=torch.float32)    # 3e-5 from float64
    close = torch.tensor([0.1 - 2e-5, 5.0], dtype=torch.float32)  # beyond GRAD_TOL of CPU's, nearer float64
    far = torch.tensor([0.1 - 2e-4, 5.0], dtype=torch.float32)    # beyond twice CPU's error
    loss = torch.tensor(1.0)
    ref = (loss, {"w": cpu}, {"w": exact})
    assert compare_grads(ref, (loss, {"w": close})) < 1e-4
    with pytest.raises(AssertionError, match="gradient of w"):
        compare_grads(ref, (loss, {"w": far}))
    with pytest.raises(AssertionError, match="gradient of w"):  # without a float64 run, CPU is the reference
        compare_grads((loss, {"w": cpu}, None), (loss, {"w": close}))


MORE = os.path.join(os.path.dirname(__file__), "..", "python", "torchneuron", "coverage", "more_architectures.tsv")


def more_rows():
    from torchneuron.coverage.cli import read_list

    return read_list(MORE)


@pytest.mark.parametrize("model_type", [r["model_type"] for r in more_rows()])
def test_tiny_configs_of_hybrid_mla_and_rotary_architectures_build_and_run_on_cpu(model_type):
    """The builders of these architectures once made invalid models (a hybrid cache with no
    attention layer, rotary or head sizes that did not divide, crashes): each now builds
    a valid tiny config whose CPU reference runs a forward with a cache and a generation."""
    import warnings

    import torch
    import transformers

    from torchneuron.coverage.tiny_configs import BOS, VOCAB, build_config, check_config

    row = next(r for r in more_rows() if r["model_type"] == model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config, _ = build_config(row)
    assert check_config(config) == []
    torch.manual_seed(0)
    model = getattr(transformers, row["causal_lm_class"])(config).eval()
    assert sum(p.numel() for p in model.parameters()) < 2_000_000  # tiny
    ids = torch.randint(3, VOCAB, (1, 6), generator=torch.Generator().manual_seed(0))
    ids[0, 0] = BOS
    with torch.no_grad():
        logits = model(ids).logits
        tokens = model.generate(ids, max_new_tokens=3, do_sample=False, disable_compile=True)
    assert logits.shape == (1, 6, VOCAB) and torch.isfinite(logits).all()
    assert tokens.shape == (1, 9)


def test_config_check_names_a_hybrid_without_attention_layers():
    import transformers

    from torchneuron.coverage.tiny_configs import check_config, tiny_kwargs

    kwargs = tiny_kwargs("qwen3_next", transformers.Qwen3NextConfig)
    kwargs["layer_types"] = ["linear_attention", "linear_attention"]
    problems = check_config(transformers.Qwen3NextConfig(**kwargs))
    assert any("full_attention" in p and "cannot tell its length" in p for p in problems), problems


def test_several_lists_run_as_one_without_duplicates(tmp_path):
    from torchneuron.coverage.cli import read_lists

    first, second = tmp_path / "a.tsv", tmp_path / "b.tsv"
    header = "model_type\tcausal_lm_class\tconfig_class\tspecial_needs\n"
    first.write_text(header + "llama\tLlamaForCausalLM\tLlamaConfig\t-\n")
    second.write_text(header + "qwen2\tQwen2ForCausalLM\tQwen2Config\t-\nllama\tLlamaForCausalLM\tLlamaConfig\t-\n")
    assert [r["model_type"] for r in read_lists([str(first), str(second)])] == ["llama", "qwen2"]


def test_compiled_generate_is_not_applicable_to_a_model_without_a_cache():
    """OpenAI GPT's forward takes no cache: each decode step reruns a longer sequence, a new graph per step."""
    import transformers

    from torchneuron.coverage.compile_stages import compiled_generate_not_applicable

    tiny = dict(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)
    reason = compiled_generate_not_applicable(transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig(**tiny)))
    assert reason and "takes no cache" in reason, reason
    assert compiled_generate_not_applicable(transformers.GPT2LMHeadModel(transformers.GPT2Config(**tiny))) is None


def causal_lm_rows():
    from torchneuron.coverage.cli import causal_lm_rows as rows

    return rows()


@pytest.mark.parametrize("model_type", [r["model_type"] for r in causal_lm_rows()])
def test_every_causal_lm_architecture_gets_a_valid_tiny_config(model_type):
    """The builder, for every architecture of Transformers' causal-LM auto mapping (configs
    only, no model): the config class accepts the derived values, the model is tiny, special
    tokens are in the vocabulary and every kind of layer of the full-size pattern is there."""
    import warnings

    from torchneuron.coverage.derive import LAYER_KEYS, MAX_LAYERS, SIZES
    from torchneuron.coverage.tiny_configs import VOCAB, build_config, check_config

    row = next(r for r in causal_lm_rows() if r["model_type"] == model_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config, kwargs = build_config(row)
        assert check_config(config) == []
    text = config.get_text_config(decoder=True)
    for key in ("hidden_size", "vocab_size"):
        value = getattr(text, key, None) if key in vars(text) else None
        if isinstance(value, int):
            assert value <= SIZES[key], (key, value)
    layers = [kwargs[k] for k in LAYER_KEYS if k in kwargs]
    assert all(n <= MAX_LAYERS for n in layers), kwargs
    assert getattr(text, "vocab_size", VOCAB) <= VOCAB


def test_derived_values_never_replace_the_tuned_ones():
    """For the listed architectures COMMON and ARCH win: the derived values only fill keys they leave."""
    import transformers

    from torchneuron.coverage.cli import read_lists
    from torchneuron.coverage.tiny_configs import config_kwargs, tiny_kwargs

    shared = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "architectures.tsv")
    for row in read_lists([p for p in (shared, MORE) if os.path.exists(p)]):
        config_class = getattr(transformers, row["config_class"])
        tuned, full = tiny_kwargs(row["model_type"], config_class), config_kwargs(row["model_type"], config_class)
        for key, value in tuned.items():  # a tuned sub-config's values stay, its other keys are derived
            got = {k: full[key].get(k) for k in value} if isinstance(value, dict) else full.get(key)
            assert got == value, (row["model_type"], key)


def test_a_hybrid_keeps_one_layer_of_each_kind():
    """Cohere2's default pattern is 3 sliding-window layers to 1 global: 2 layers would all be
    sliding, so the tiny model takes the first layer of each kind."""
    import transformers

    from torchneuron.coverage.tiny_configs import config_kwargs

    kwargs = config_kwargs("cohere2", transformers.Cohere2Config)
    assert kwargs["num_hidden_layers"] == 2
    assert sorted(transformers.Cohere2Config(**kwargs).layer_types) == ["full_attention", "sliding_attention"]


def test_an_architecture_of_the_auto_mapping_passes_every_stage(tmp_path):
    """Cohere2, new to the lists: its tiny config is derived (the 3:1 sliding/global pattern
    fitted into 2 layers), and the row comes from the auto mapping (--all-causal-lm --only)."""
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "torchneuron.coverage", "--all-causal-lm", "--only", "cohere2", "--out", str(out),
         "--stage-timeout", "120"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (r,) = json.loads((out / "coverage.json").read_text())
    assert r["model_type"] == "cohere2" and r["passed"] is True, r
    assert all(r["stages"][s]["status"] in ("pass", "n/a") for s in STAGES), r["stages"]
    assert r["config"]["layer_types"] == ["sliding_attention", "full_attention"] and r["fallback_ops"] == []
    assert "1 of 1 architectures pass every stage" in (out / "coverage.md").read_text()


def test_all_causal_lm_rows_and_the_exclude_list(tmp_path):
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from torchneuron.coverage.cli import parse_args, select_rows

    rows = select_rows(parse_args(["--all-causal-lm", "--out", str(tmp_path)]))
    assert [r["model_type"] for r in rows] == list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    new = select_rows(parse_args(["--all-causal-lm", "--exclude-list", MORE, "--out", str(tmp_path)]))
    assert len(new) == len(rows) - len(more_rows()) and "qwen3_next" not in {r["model_type"] for r in new}
    only = select_rows(parse_args(["--all-causal-lm", "--list", MORE, "--only", "xmod,jamba", "--out", str(tmp_path)]))
    assert [r["model_type"] for r in only] == ["jamba", "xmod"]  # the lists' rows first


def test_outcomes_tell_the_device_from_the_cpu_reference_and_the_environment():
    from torchneuron.coverage.common import STAGES as TOOL_STAGES
    from torchneuron.coverage.outcome import CANNOT_BUILD, CPU, DEVICE, PASS, outcome

    def record(stage, error, passed=False):
        stages = {s: {"status": "pass"} for s in TOOL_STAGES}
        if stage in stages:
            stages[stage] = {"status": "fail", "error": error}
        return dict(passed=passed, stage=stage, error=error, stages=stages)

    assert outcome(record("all", "", passed=True)) == (PASS, "")
    assert outcome(record("build", "ImportError: needs timm"))[0] == CANNOT_BUILD
    assert outcome(record("build", "ValueError: bad config")) == (CPU, "build: ValueError: bad config")
    assert outcome(record("forward", "cpu reference: KeyError: 'x'"))[0] == CPU
    assert outcome(record("backward", "AssertionError: gradient of w")) == (
        DEVICE, "backward: AssertionError: gradient of w")


def test_runs_of_different_stages_merge_into_one_record():
    from torchneuron.coverage.common import STAGES as TOOL_STAGES
    from torchneuron.coverage.merge import merge_record

    eager = dict(model_type="llama", passed=True, stage="all", error="", fallback_ops=[], notes=[], wall_time_s=2.0,
                 stages={s: {"status": "not run" if s in COMPILED else "pass"} for s in TOOL_STAGES})
    compiled = dict(model_type="llama", passed=False, stage="compiled_generate", error="x", fallback_ops=["aten::a"],
                    notes=[], wall_time_s=1.0,
                    stages={s: {"status": "fail" if s == "compiled_generate" else "not run"} for s in TOOL_STAGES})
    compiled["stages"]["to_device"] = {"status": "pass"}
    compiled["stages"]["compiled_forward"] = {"status": "pass"}
    rec = merge_record(eager, compiled)
    assert rec["stages"]["forward"]["status"] == "pass" and rec["stages"]["compiled_forward"]["status"] == "pass"
    assert (rec["passed"], rec["stage"], rec["fallback_ops"], rec["wall_time_s"]) == (
        False, "compiled_generate", ["aten::a"], 3.0)


def test_a_later_run_that_builds_replaces_an_earlier_build_failure():
    from torchneuron.coverage.common import STAGES as TOOL_STAGES
    from torchneuron.coverage.merge import merge_record

    failed = dict(model_type="x", passed=False, stage="build", error="ValueError: old config",
                  stages={s: {"status": "not run"} for s in TOOL_STAGES})
    rerun = dict(model_type="x", passed=True, stage="all", error="", stages={s: {"status": "pass"} for s in TOOL_STAGES})
    assert merge_record(failed, rerun)["passed"] is True
    assert merge_record(rerun, failed) == failed


def bf16_case(rerouted=(), far=()):
    """forward_bf16's inputs for 2 x 8 tokens: CPU's bfloat16 logits 1e-3 from the float32
    ones; the device's 1.5e-3, and 0.05 at the `far` tokens; one routed call of top-2 of 4
    experts per token, the `rerouted` tokens sent to other experts on the device."""
    import torch

    g = torch.Generator().manual_seed(0)
    exact = torch.randn(2, 8, 32, generator=g)
    cpu = (exact + 1e-3).to(torch.bfloat16).float()
    device = exact + 1.5e-3
    for row, pos in far:
        device[row, pos] += 0.05
    cpu_routing = torch.tensor([[0, 1]] * 16)
    device_routing = cpu_routing.clone()
    for row, pos in rerouted:
        device_routing[row * 8 + pos] = torch.tensor([1, 3])
    name = "model.layers.0.mlp.experts"
    return (cpu, exact, None, [(name, cpu_routing)]), (device, [(name, device_routing)])


def test_bf16_leaves_out_a_token_routed_to_other_experts_and_reports_it():
    from torchneuron.coverage.model_stages import compare_bf16
    from torchneuron.coverage.runner import notes

    ref, got = bf16_case(rerouted=[(1, 2)], far=[(1, 2)])
    error, extra = compare_bf16(ref, got)
    assert error < 2e-3
    assert extra["excluded_tokens"] == 1 and extra["excluded_positions"] == [[1, 2]] and extra["routed_calls"] == 1
    assert "other experts" in extra["excluded_reason"]
    assert notes({"forward_bf16": dict(status="pass", **extra)}) == [
        "forward_bf16 left out 1 token routed to other experts than on CPU"]
    # Routed alike: nothing left out, the far token fails as before.
    ref, got = bf16_case(far=[(1, 2)])
    with pytest.raises(AssertionError, match="bfloat16 logits on the device are 0.05"):
        compare_bf16(ref, got)


def test_bf16_judges_the_tokens_after_a_rerouted_one_and_says_where_the_worst_is():
    from torchneuron.coverage.model_stages import compare_bf16

    ref, got = bf16_case(rerouted=[(1, 2)], far=[(1, 2), (1, 5)])
    with pytest.raises(AssertionError, match=r"on the 15 of 16 tokens routed as on CPU.*worst at row 1 position 5, "
                                             r"after the rerouted position\(s\) \[2\] of its row"):
        compare_bf16(ref, got)


def test_bf16_fails_when_more_than_a_quarter_of_the_tokens_are_rerouted():
    from torchneuron.coverage.model_stages import MAX_REROUTED_SHARE, compare_bf16

    assert MAX_REROUTED_SHARE == 0.25
    four = [(0, 1), (0, 6), (1, 0), (1, 7)]
    assert compare_bf16(*bf16_case(rerouted=four))[1]["excluded_tokens"] == 4  # a quarter: still judged
    with pytest.raises(AssertionError, match=r"5 of 16 tokens are routed to other experts on the device than in "
                                             r"CPU's bfloat16 run \(at most 25% may be left out\), e.g. row 0 "
                                             r"position 1"):
        compare_bf16(*bf16_case(rerouted=four + [(1, 3)]))


def test_bf16_of_a_dense_model_is_judged_on_every_token_as_before():
    from torchneuron.coverage.common import max_abs_diff
    from torchneuron.coverage.model_stages import compare_bf16

    (cpu, exact, _, _), (device, _) = bf16_case(far=[(1, 2)])
    limit = 2 * max_abs_diff(exact, cpu) + 1e-5
    with pytest.raises(AssertionError) as failure:
        compare_bf16((cpu, exact, None, []), (device, []))
    assert str(failure.value) == (f"bfloat16 logits on the device are {max_abs_diff(exact, device):.3g} from the "
                                  f"float32 model's, CPU's are {max_abs_diff(exact, cpu):.3g} (limit {limit:.3g})")
    (cpu, exact, _, _), (device, _) = bf16_case()
    cpu_error = max_abs_diff(exact, cpu)
    assert compare_bf16((cpu, exact, cpu, []), (device, [])) == (
        max_abs_diff(exact, device), {"cpu_error": cpu_error, "cpu_eager_error": cpu_error})
    # Records that cannot be matched call by call leave nothing out, and say so.
    ref, (device, routing) = bf16_case(rerouted=[(1, 2)], far=[(1, 2)])
    with pytest.raises(AssertionError, match="bfloat16 logits on the device are 0.05"):
        compare_bf16(ref, (device, routing + routing))


def test_routing_is_recorded_from_the_experts_or_the_named_router():
    """Mixtral's experts get each token's top-k experts as `top_k_index`; a model whose experts
    take no such argument is recorded from the router that `_can_record_outputs` names (the
    top-k of its logits); a dense model records nothing."""
    import torch
    import transformers
    from torch import nn
    from transformers.utils.output_capturing import OutputRecorder

    from torchneuron.coverage.routing import record_routing, rerouted_tokens

    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                                        num_experts_per_tok=2)
    model = transformers.MixtralForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), record_routing(model, ids.numel()) as routing:
        model(ids)
    assert [name for name, _ in routing] == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    assert all(index.shape == (10, 2) and torch.equal(index, index.sort(-1).values) for _, index in routing)
    assert not rerouted_tokens(routing, routing).any()

    class Router(nn.Module):
        top_k = 1

        def forward(self, x):
            return x[..., :3], "other output"

    class Block(nn.Module):
        _can_record_outputs = {"router_logits": OutputRecorder(Router, index=0)}

        def __init__(self):
            super().__init__()
            self.router = Router()

        def forward(self, x):
            return self.router(x)

    x = torch.tensor([[[0.0, 2.0, 1.0, 9.0], [3.0, 1.0, 2.0, 9.0]]])
    block = Block()
    with record_routing(block, 2) as routing:
        block(x)
    assert len(routing) == 1 and routing[0][0] == "router" and routing[0][1].tolist() == [[1], [0]]

    dense = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))
    with torch.no_grad(), record_routing(dense, ids.numel()) as routing:
        dense(ids)
    assert routing == []


def test_a_decode_step_that_recompiles_on_cpu_too_is_told_apart():
    """qwen4_exp hands its decoder the position embeddings of the whole sequence so far:
    under the compile settings Transformers gives neuron (dynamic=False) it recompiles
    every step on CPU too, so compiled_generate calls it not applicable; a Llama
    decodes within Dynamo's limit, and a recompile there stays a failure."""
    from torchneuron.coverage.compile_stages import compiled_generate_prompts, recompiles_on_cpu_too
    from torchneuron.coverage.model_stages import build_cpu_model

    rows = {r["model_type"]: r for r in causal_lm_rows()}
    prompts = compiled_generate_prompts()
    assert recompiles_on_cpu_too(build_cpu_model(rows["qwen4_exp_text"])[0], prompts)
    assert not recompiles_on_cpu_too(build_cpu_model(rows["llama"])[0], prompts)
