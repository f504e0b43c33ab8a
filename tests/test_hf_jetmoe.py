"""JetMoe under torch.compile on neuron (hf_integration adaptation 14).

JetMoe's router turns each expert's row count into a Python list, and its
experts split the sorted rows with it, so Dynamo guarded on every count and the
decode step that `generate(cache_implementation="static")` compiles recompiled
whenever the routing changed. While Dynamo traces a neuron model, the
adaptation keeps the counts a tensor and runs the experts with static shapes;
eagerly the original methods run. A tiny JetMoe is built from its config with
random weights (no downloads).
"""
import copy
import warnings

import pytest
import torch
import torch._dynamo

import torchneuron
from torchneuron.hf_integration import _transformers_models

pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")

from transformers import JetMoeConfig, JetMoeForCausalLM  # noqa: E402
from transformers.models.jetmoe import modeling_jetmoe  # noqa: E402

VOCAB, NEW = 128, 8
CONFIG = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, kv_channels=16, num_local_experts=4, num_experts_per_tok=2,
              max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
TOL = dict(rtol=1e-5, atol=1e-5)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def tiny_model():
    torch.manual_seed(0)
    return JetMoeForCausalLM(JetMoeConfig(**CONFIG)).eval()


def prompts(count=2, batch=2, length=6):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, VOCAB, (batch, length), generator=g) for _ in range(count)]


def test_static_cache_generate_compiles_once():
    """Two greedy static-cache generate() calls with different prompts of the same length:
    Transformers compiles the decode step (backend "neuron"); tokens equal CPU's eager
    greedy tokens, the decode step runs as one compiled program, and the second call
    compiles nothing although its tokens are routed to other experts."""
    cpu = tiny_model()
    model = copy.deepcopy(cpu).to("neuron")
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, cache_implementation="static")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, ids in enumerate(prompts()):
            mask = torch.ones_like(ids)
            got = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), **kwargs).cpu()
            expected = cpu.generate(ids, attention_mask=mask, **kwargs)
            assert torch.equal(got, expected), f"prompt {i}: neuron\n{got}\ncpu\n{expected}"
            if i == 0:
                first = torchneuron.compile_metrics()
    assert len(first) == 1, [r["recompile_reason"] for r in first]
    later = torchneuron.compile_metrics()[len(first):]
    assert not later, [r["recompile_reason"] for r in later]
    (record,) = first
    assert record["fallback"] is None
    for kind, program in record["programs"].items():
        assert program["executor"] == "compiler", (kind, program["reason"])


def test_adaptation_still_needed():
    """Transformers' own router still returns the counts as a Python list (the cause of the
    guards): if an upgrade keeps them a tensor, or splits the rows another way, this fails
    and adaptation 14 should be re-checked or dropped."""
    gating, experts = modeling_jetmoe.JetMoeTopKGating, modeling_jetmoe.JetMoeParallelExperts
    assert getattr(gating, "__torchneuron_patched__", False)
    original_gating, original_experts = gating.forward.__wrapped__, experts.forward.__wrapped__
    router = tiny_model().model.layers[0].mlp.router
    *_, expert_size, _ = original_gating(router, torch.randn(5, CONFIG["hidden_size"]))
    assert isinstance(expert_size, list) and sum(expert_size) == 5 * CONFIG["num_experts_per_tok"]
    assert original_experts.__code__.co_varnames[:3] == ("self", "inputs", "expert_size")
    assert "split" in original_experts.__code__.co_names


def _static_paths(monkeypatch):
    """The compiled-path code of adaptation 14 running eagerly on CPU."""
    monkeypatch.setattr(_transformers_models, "_tracing_on_neuron", lambda tensor: True)


def test_static_path_equals_original(monkeypatch):
    """The adaptation's router and experts compute what Transformers' do: the same routing
    (counts, order, gates), and logits, router logits and every gradient equal the
    original's on CPU. Fails if an upgrade changes the router's math that adaptation 14
    copies."""
    model = tiny_model()
    twin = copy.deepcopy(model)
    ids = prompts(1, batch=2, length=9)[0]
    hidden = torch.randn(7, CONFIG["hidden_size"])
    router = model.model.layers[0].mlp.router
    expected = modeling_jetmoe.JetMoeTopKGating.forward.__wrapped__(router, hidden)
    expected_out = twin(input_ids=ids, labels=ids, output_router_logits=True)
    expected_out.loss.backward()

    _static_paths(monkeypatch)
    got = router(hidden)
    assert isinstance(got[3], torch.Tensor) and got[3].tolist() == expected[3]
    for i in (0, 1, 2, 4):
        assert torch.equal(got[i], expected[i]), i
    out = model(input_ids=ids, labels=ids, output_router_logits=True)
    out.loss.backward()
    torch.testing.assert_close(out.logits, expected_out.logits, **TOL)
    for a, b in zip(out.router_logits, expected_out.router_logits):
        torch.testing.assert_close(a, b, **TOL)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=name)


def test_eager_path_unchanged(monkeypatch):
    """Outside compilation the original methods run, on neuron as on CPU: the router
    returns its list, and the forward equals CPU's without touching the static path."""

    def refuse(*args):
        raise AssertionError("the static path ran eagerly")

    monkeypatch.setattr(_transformers_models, "_jetmoe_gating_counts_as_tensor", refuse)
    monkeypatch.setattr(_transformers_models, "_jetmoe_experts_static", refuse)
    cpu = tiny_model()
    model = copy.deepcopy(cpu).to("neuron")
    hidden = torch.randn(5, CONFIG["hidden_size"])
    *_, expert_size, _ = model.model.layers[0].mlp.router(hidden.to("neuron"))
    assert isinstance(expert_size, list)
    ids = prompts(1)[0]
    with torch.no_grad():
        got = model(input_ids=ids.to("neuron")).logits.cpu()
        expected = cpu(input_ids=ids).logits
    torch.testing.assert_close(got, expected, **TOL)


def test_compiled_training_step_equals_eager():
    """Autograd through the adaptation: a compiled training step of the tiny JetMoe on
    neuron (forward and backward programs) gives CPU eager's loss and gradients."""
    cpu = tiny_model().train()
    model = copy.deepcopy(cpu).to("neuron")
    ids = prompts(1, length=9)[0]
    loss = torch.compile(model, backend="neuron")(input_ids=ids.to("neuron"), labels=ids.to("neuron")).loss
    loss.backward()
    expected = cpu(input_ids=ids, labels=ids).loss
    expected.backward()
    torch.testing.assert_close(loss.cpu(), expected, **TOL)
    for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL, msg=name)
    (record,) = torchneuron.compile_metrics()
    assert {kind: p["executor"] for kind, p in record["programs"].items()} == {
        "forward": "compiler", "backward": "compiler"}
