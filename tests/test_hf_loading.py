"""Loading with device_map="neuron" reserves about the model's size, not twice.

`from_pretrained(device_map=...)` calls Transformers' allocator warm-up
(`caching_allocator_warmup`), which on CUDA/XPU allocates and frees one block of
the model's size so that the weights then load into the cached block. Transformers
5.23 skips it for device type "neuron". Each load runs in a fresh process so that
the peak statistics are the load's own; the second case puts a CUDA-style warm-up
block in front of the load, as Transformers would if it stopped skipping neuron.
"""
import json
import os

import pytest

pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")

PATH_VAR = "TORCHNEURON_TEST_MODEL_DIR"
# About 40 MiB of float32 parameters, most of them, as in real models, in tensors above the
# allocator's 1 MiB small-pool limit: a CUDA-style warm-up block serves only those.
CONFIG = dict(
    vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=2, num_attention_heads=8,
    num_key_value_heads=4, max_position_embeddings=64, tie_word_embeddings=False,
)


def _load(cuda_style_warmup):
    import torch
    import transformers.modeling_utils as mu
    from transformers import AutoModelForCausalLM

    path = os.environ[PATH_VAR]
    calls = []
    original = mu.caching_allocator_warmup

    def warmup(model, expanded_device_map, hf_quantizer):
        devices = sorted({str(d) for d in expanded_device_map.values()})
        original(model, expanded_device_map, hf_quantizer)
        calls.append(dict(devices=devices, reserved_after=torch.neuron.memory_reserved()))
        if cuda_style_warmup:
            accelerator_map = {p: torch.device(d) for p, d in expanded_device_map.items()
                               if mu.is_accelerator_device(d)}
            for device, nbytes in mu.get_total_byte_count(model, accelerator_map, hf_quantizer).items():
                torch.empty(int(nbytes // 2), dtype=torch.float16, device=device)  # freed at once, stays cached

    mu.caching_allocator_warmup = warmup
    model = AutoModelForCausalLM.from_pretrained(path, device_map="neuron")
    torch.neuron.synchronize()
    cpu = AutoModelForCausalLM.from_pretrained(path)
    ids = torch.arange(3, 11).view(1, 8)
    with torch.no_grad():
        got, expected = model(ids.to("neuron")).logits.cpu(), cpu(ids).logits
    try:
        torch.testing.assert_close(got, expected)  # float32 tolerances
        same = True
    except AssertionError as e:
        same = str(e)
    return dict(
        calls=calls,
        devices=sorted({str(p.device) for p in model.parameters()}),
        param_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        buffer_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        largest_bytes=max(p.numel() * p.element_size() for p in model.parameters()),
        max_reserved=torch.neuron.max_memory_reserved(),
        max_allocated=torch.neuron.max_memory_allocated(),
        same_logits=same,
    )


def load_plain():
    return _load(cuda_style_warmup=False)


def load_after_cuda_style_warmup():
    return _load(cuda_style_warmup=True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama_40mb")
    LlamaForCausalLM(LlamaConfig(**CONFIG)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def loads(in_fresh_process, model_dir):
    env = {PATH_VAR: model_dir}
    for name in ("load_plain", "load_after_cuda_style_warmup"):
        in_fresh_process.start(name, env)  # in parallel
    return {name: in_fresh_process(name, env, timeout=180)
            for name in ("load_plain", "load_after_cuda_style_warmup")}


@pytest.mark.parametrize("case", ["load_plain", "load_after_cuda_style_warmup"])
def test_load_reserves_less_than_one_and_a_half_times_the_model(loads, case):
    r = loads[case]
    info = json.dumps(r)
    assert r["devices"] == ["neuron:0"], info
    assert r["same_logits"] is True, info
    assert r["calls"] and r["calls"][0]["devices"] == ["neuron"], info  # the warm-up ran for this load
    model_bytes = r["param_bytes"] + r["buffer_bytes"]
    assert model_bytes > 32 * 2**20, info
    # Loading holds at most one tensor twice at a time (plus the allocator's 512-byte rounding).
    assert r["max_allocated"] <= model_bytes + r["largest_bytes"] + 2**20, info
    assert r["max_reserved"] < 1.5 * model_bytes, info


def test_transformers_warmup_reserves_nothing_on_neuron(loads):
    assert loads["load_plain"]["calls"][0]["reserved_after"] == 0, loads["load_plain"]
