"""`from_pretrained(device_map=...)` places models on the neuron cores.

The automatic strategies go through Accelerate's memory accounting, which
torchneuron adapts (python/torchneuron/hf_integration/); device strings work
as is; integer indices are refused with a message naming the device string.
"""
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")
pytest.importorskip("accelerate", reason="the Hugging Face packages of requirements.txt are not installed")

from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

STRATEGIES = ["auto", "balanced", "balanced_low_0", "sequential"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    """(directory of a saved tiny Llama, input ids, its CPU logits, its size in bytes)."""
    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(path)
    ids = torch.randint(3, config.vocab_size, (2, 8))
    with torch.no_grad():
        logits = model(ids).logits
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    return path, ids, logits, size


def load(path, **kwargs):
    return AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()


def param_devices(model):
    return {str(p.device) for p in model.parameters()} | {str(b.device) for b in model.buffers()}


def check_logits(model, ids, expected):
    with torch.no_grad():
        got = model(ids.to(model.device)).logits
    assert got.device.type == "neuron"
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_accelerate_sees_the_neuron_cores(two_cores):
    from accelerate.utils import get_max_memory, is_neuron_available

    assert is_neuron_available()
    memory = get_max_memory()
    n = torch.neuron.device_count()
    assert [k for k in memory if isinstance(k, int)] == list(range(n))
    for i in range(n):
        assert 0 < memory[i] <= torch.neuron.get_device_properties(i).total_memory
    # neuron device keys are accepted and normalised to indices
    assert get_max_memory({"neuron:1": "1MB", "cpu": 10}) == {1: 10**6, "cpu": 10}
    with pytest.raises(ValueError, match="neuron"):
        get_max_memory({n: 10})


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_automatic_strategies_load_on_neuron(two_cores, tiny_llama, strategy):
    path, ids, expected, _ = tiny_llama
    model = load(path, device_map=strategy)
    devices = param_devices(model)
    assert devices and all(d.startswith("neuron:") for d in devices), devices
    if hasattr(model, "hf_device_map"):
        assert all(str(v).startswith("neuron:") for v in model.hf_device_map.values()), model.hf_device_map
    check_logits(model, ids, expected)


def test_balanced_spreads_layers_over_both_cores(two_cores, tiny_llama):
    path, ids, expected, _ = tiny_llama
    model = load(path, device_map="balanced")
    assert param_devices(model) == {"neuron:0", "neuron:1"}
    layer_devices = {model.hf_device_map.get(f"model.layers.{i}") for i in range(4)}
    assert layer_devices == {"neuron:0", "neuron:1"}, model.hf_device_map
    check_logits(model, ids, expected)


def test_sequential_fills_core_0_then_core_1(two_cores, tiny_llama):
    path, ids, expected, size = tiny_llama
    max_memory = {"neuron:0": size // 2, "neuron:1": 4 * size}
    model = load(path, device_map="sequential", max_memory=max_memory)
    assert param_devices(model) == {"neuron:0", "neuron:1"}, model.hf_device_map
    assert model.hf_device_map["model.embed_tokens"] == "neuron:0"
    assert model.hf_device_map["lm_head"] == "neuron:1"
    check_logits(model, ids, expected)


@pytest.mark.parametrize("device_map,device", [
    ("neuron", "neuron:0"),
    ("neuron:1", "neuron:1"),
    ({"": "neuron"}, "neuron:0"),
    ({"": "neuron:1"}, "neuron:1"),
    (torch.device("neuron", 1), "neuron:1"),
])
def test_device_strings(two_cores, tiny_llama, device_map, device):
    path, ids, expected, _ = tiny_llama
    model = load(path, device_map=device_map)
    assert param_devices(model) == {device}
    check_logits(model, ids, expected)


@pytest.mark.parametrize("device_map,hint", [
    (0, "neuron:0"),
    (1, "neuron:1"),
    ({"": 1}, "neuron:1"),
    ({"": 0}, "neuron:0"),
])
def test_integer_indices_name_the_device_string(neuron, tiny_llama, device_map, hint):
    path = tiny_llama[0]
    with pytest.raises(ValueError, match=hint):
        load(path, device_map=device_map)


def test_importing_torch_imports_neither_library(run_python):
    done = run_python("""
        import sys
        import torch
        assert hasattr(torch, "neuron")
        print(sorted(m for m in ("transformers", "accelerate") if m in sys.modules))
    """)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_already_imported_libraries_are_adapted(run_python):
    # Accelerate and Transformers imported with the autoload off, torchneuron after them.
    done = run_python("""
        import transformers.modeling_utils, accelerate.utils
        import torchneuron, torch
        from accelerate.utils import get_max_memory, is_neuron_available
        assert is_neuron_available()
        assert 0 in get_max_memory() and 1 in get_max_memory()
        try:
            transformers.modeling_utils.check_and_set_device_map(0)
        except ValueError as e:
            assert "neuron:0" in str(e), e
        else:
            raise AssertionError("device_map=0 was accepted")
        print("ok")
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert done.stdout.strip().splitlines()[-1] == "ok"


def test_device_map_module_imported_before_torch(run_python):
    # transformers.integrations.accelerate imports torch itself, so it is half-executed while
    # torchneuron autoloads; its functions are adapted once it has finished.
    done = run_python("""
        import warnings
        warnings.simplefilter("error")
        import transformers.integrations.accelerate
        import transformers.modeling_utils
        try:
            transformers.modeling_utils.check_and_set_device_map(0)
        except ValueError as e:
            assert "neuron:0" in str(e), e
        else:
            raise AssertionError("device_map=0 was accepted")
        print("ok")
    """)
    assert done.stdout.strip().splitlines()[-1] == "ok"
