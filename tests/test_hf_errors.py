"""Errors of the neuron backend name the Hugging Face architecture that ran into them.

A model placed on neuron (`from_pretrained(device_map=...)`, `.to`, `.neuron()`)
has the `forward` and `generate` of its class wrapped
(python/torchneuron/hf_integration/_transformers_models.py, adaptation 5): an exception carrying the backend's "[neuron]" mark is re-raised
with the same type, "LlamaForCausalLM (model_type 'llama') on neuron:0: " in
front, chained to the original. The failures here are forced, because every
architecture of the coverage list runs: an op with a dtype the device does not
have (uint32), a shape error raised at the op, and an unsupported buffer.
"""
import copy
import gc
import inspect
import io
import pickle

import pytest
import torch

pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")

from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

PREFIX = "LlamaForCausalLM (model_type 'llama') on neuron:0: "
WRAPPED = "__torchneuron_names_errors__"
KW = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("llama_errors")
    model.save_pretrained(path)
    ids = torch.randint(3, config.vocab_size, (2, 5))
    with torch.no_grad():
        expected = model.generate(ids, **KW)
    return path, ids, expected


def load(path, **kwargs):
    return AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()


def unsupported_dtype(self, hidden_states):
    return hidden_states.to(torch.uint32)  # not a neuron dtype


def wrong_shape(self, hidden_states):
    return hidden_states @ torch.ones(3, 3, device=hidden_states.device)


def break_norm(model, how):
    """Makes the final norm fail; returns what heal_norm needs to undo it."""
    norm = model.model.norm
    previous = vars(norm).get("forward")  # an Accelerate hook, if any
    norm.forward = how.__get__(norm)
    return norm, previous


def heal_norm(broken):
    norm, previous = broken
    if previous is None:
        del norm.forward
    else:
        norm.forward = previous


def check_generates(model, ids, expected):
    got = model.generate(ids.to(model.device), **KW)
    assert torch.equal(got.cpu(), expected)


def test_forward_error_names_the_op_and_the_architecture(saved):
    path, ids, expected = saved
    model = load(path, device_map="neuron")
    norm = break_norm(model, unsupported_dtype)
    with pytest.raises(TypeError) as info:
        model(ids.to("neuron"))
    message = str(info.value)
    assert message.startswith(PREFIX), message
    assert "empty_strided: dtype UInt32 is not supported on neuron" in message
    cause = info.value.__cause__
    assert type(cause) is TypeError and str(cause).startswith("[neuron] "), cause
    heal_norm(norm)
    check_generates(model, ids, expected)  # the model and the device keep working


def test_error_inside_generate_is_named_once(saved):
    path, ids, expected = saved
    model = load(path, device_map="neuron")
    norm = break_norm(model, wrong_shape)
    with pytest.raises(RuntimeError) as info:
        model.generate(ids.to("neuron"), **KW)
    message = str(info.value)
    assert message.startswith(PREFIX + "aten::"), message
    assert "cannot be multiplied" in message and message.count("LlamaForCausalLM") == 1
    heal_norm(norm)
    check_generates(model, ids, expected)


@pytest.mark.parametrize("place", ["to", "neuron", "from_config"])
def test_models_placed_by_hand_are_covered(saved, place):
    path, ids, expected = saved
    cpu = load(path)
    if place == "to":
        model = cpu.to("neuron")
    elif place == "neuron":
        model = cpu.neuron()
    else:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cpu.config).to(device="neuron", dtype=torch.float32)
    break_norm(model, unsupported_dtype)
    with pytest.raises(TypeError, match="^" + PREFIX.replace("(", r"\(").replace(")", r"\)")):
        model(ids.to("neuron"))


def test_placement_errors_name_the_architecture(saved):
    path = saved[0]
    model = load(path)
    model.model.register_buffer("phase", torch.zeros(4, dtype=torch.complex128), persistent=False)
    with pytest.raises(TypeError) as info:
        model.to("neuron:1")
    message = str(info.value)
    assert message.startswith("LlamaForCausalLM (model_type 'llama') on neuron:1: "), message
    assert "dtype ComplexDouble is not supported" in message


class HashedLlama(LlamaForCausalLM):
    """A variant with a buffer in a dtype the device does not have."""

    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("hashes", torch.arange(4).to(torch.uint32), persistent=False)


def test_loading_errors_name_the_architecture(saved):
    with pytest.raises(TypeError) as info:
        HashedLlama.from_pretrained(saved[0], device_map="neuron:1")
    message = str(info.value)
    assert message.startswith("HashedLlama (model_type 'llama') on neuron:1: "), message
    assert "dtype UInt32 is not supported" in message and type(info.value.__cause__) is TypeError


def test_cpu_errors_pass_unchanged(saved):
    path, ids, _ = saved
    model = load(path, device_map="neuron").to("cpu")
    assert getattr(model.forward, WRAPPED, False)  # still wrapped after moving back
    break_norm(model, wrong_shape)
    with pytest.raises(RuntimeError) as info:
        model(ids)
    assert "LlamaForCausalLM" not in str(info.value) and info.value.__cause__ is None


class CpuOnlyLlama(LlamaForCausalLM):
    pass


def test_classes_never_on_neuron_are_untouched(saved):
    model = CpuOnlyLlama.from_pretrained(saved[0])
    assert WRAPPED not in vars(CpuOnlyLlama) and not vars(model).keys() & {"forward", "generate"}
    model.to(torch.float32)
    assert WRAPPED not in vars(CpuOnlyLlama)


def test_del_frees_device_memory_at_once(saved):
    # The wrappers add no reference from the model to itself: reference counting frees it.
    model = load(saved[0], device_map="neuron")
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    gc.disable()
    try:
        del model
        torch.neuron.synchronize()
        assert torch.neuron.memory_allocated() <= before - size
    finally:
        gc.enable()


def test_wrapper_keeps_signatures_and_survives_copies(saved, tmp_path):
    path, ids, expected = saved
    model = load(path, device_map="neuron")
    cls = type(model)
    assert inspect.signature(model.forward) == inspect.signature(cls.forward.__get__(model))
    assert model._supports_logits_to_keep()  # generate() reads the forward signature
    assert model.forward.__name__ == "forward"
    assert not vars(model).keys() & {"forward", "generate"}  # nothing on the instance
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        check_generates(clone, ids, expected)
        break_norm(clone, unsupported_dtype)
        with pytest.raises(TypeError, match="^LlamaForCausalLM"):
            clone(ids.to("neuron"))
    # State dicts hold tensors only; save_pretrained round-trips.
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    state = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    assert set(state) == set(model.state_dict())
    model.save_pretrained(tmp_path)
    check_generates(load(tmp_path, device_map="neuron"), ids, expected)


class AdapterWrapper(torch.nn.Module):
    """What PEFT does: hold the model, swap a Linear for one with a low-rank
    update, and call the model's forward and generate."""

    def __init__(self, model):
        super().__init__()
        self.base_model = model
        proj = model.model.layers[0].self_attn.q_proj
        self.lora_a = torch.nn.Linear(proj.in_features, 2, bias=False, device=proj.weight.device)
        self.lora_b = torch.nn.Linear(2, proj.out_features, bias=False, device=proj.weight.device)
        torch.nn.init.zeros_(self.lora_b.weight)
        base, a, b = proj, self.lora_a, self.lora_b

        class LoraLinear(torch.nn.Module):
            def forward(self, x):
                return base(x) + b(a(x))

        model.model.layers[0].self_attn.q_proj = LoraLinear()

    def forward(self, *args, **kwargs):
        return self.base_model.forward(*args, **kwargs)

    def generate(self, *args, **kwargs):
        return self.base_model.generate(*args, **kwargs)


def test_adapter_style_wrapping(saved):
    path, ids, expected = saved
    wrapped = AdapterWrapper(load(path, device_map="neuron"))
    got = wrapped.generate(ids.to("neuron"), **KW)
    assert torch.equal(got.cpu(), expected)  # zero-initialised update: same tokens
    break_norm(wrapped.base_model, unsupported_dtype)
    with pytest.raises(TypeError, match="^LlamaForCausalLM"):
        wrapped(ids.to("neuron"))


def test_transformers_imported_before_torch(run_python):
    # transformers.modeling_utils is then the first to import torch, and is half-executed
    # while torchneuron autoloads; it is adapted once it has finished.
    done = run_python("""
        import warnings
        warnings.simplefilter("error")
        from transformers import PreTrainedModel
        from transformers import LlamaConfig, LlamaForCausalLM
        import torch
        config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2)
        model = LlamaForCausalLM(config).to("neuron")
        assert getattr(model.forward, "__torchneuron_names_errors__", False)
        assert getattr(model.generate, "__torchneuron_names_errors__", False)
        print("ok")
    """)
    assert done.stdout.strip().splitlines()[-1] == "ok"


def test_models_spread_by_accelerate_hooks(two_cores, saved):
    # device_map="balanced" dispatches the layers over both cores with Accelerate's hooks.
    path, ids, expected = saved
    model = load(path, device_map="balanced")
    assert {str(p.device) for p in model.parameters()} == {"neuron:0", "neuron:1"}
    check_generates(model, ids, expected)
    norm = break_norm(model, unsupported_dtype)
    with pytest.raises(TypeError, match="^LlamaForCausalLM \\(model_type 'llama'\\) on neuron:"):
        model(ids.to("neuron"))
    heal_norm(norm)
    check_generates(model, ids, expected)
