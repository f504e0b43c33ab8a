"""Hugging Face generation on neuron, as users write it, compared with CPU.

Small Llama- and Qwen3-style models are built from a config, saved with
`save_pretrained` together with a small word-level tokenizer, and loaded back
on both devices. Greedy tokens must equal CPU's. Static-cache generation passes
`disable_compile=True` to test eager decoding: on a neuron model Transformers
would `torch.compile` the decoding step with the Dynamo backend "neuron"
(`test_static_cache_compiles_by_default` checks that path; tests/test_compile.py
counts its recompilations).

Sampling draws from the device's own generator (one per core, seeded by
`torch.manual_seed`), so the tests ask what the device promises: the same seed
gives the same tokens, tokens are valid, and top-k 1 sampling equals CPU's
greedy tokens. (Today's generator runs the CPU's algorithm, and sampled tokens
happen to equal CPU's under the same seed; that is not asserted.)
"""
import pytest
import torch

pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt are not installed")
pytest.importorskip("tokenizers", reason="the Hugging Face packages of requirements.txt are not installed")

from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
    pipeline,
)

VOCAB, PAD, BOS, EOS = 128, 0, 1, 2
NEW = 8
COMMON = dict(
    vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=128, bos_token_id=BOS, eos_token_id=EOS,
    pad_token_id=PAD,
)
ARCHS = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, {}),
}
# Left-padded batch: rows of different lengths (the first is unpadded).
ROWS = [[5, 17, 33, 9, 61, 70, 12], [44, 8, 100, 3], [90, 21]]


def build_tokenizer():
    """A word-level tokenizer over the model's vocabulary: "<pad>" "<s>" "</s>" "<unk>" "w4" ... "w127"."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, VOCAB)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        padding_side="left",
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{arch: directory with the saved model and tokenizer}."""
    out = {}
    for name, (config_class, model_class, extra) in ARCHS.items():
        torch.manual_seed(0)
        model = model_class(config_class(**COMMON, **extra))
        path = tmp_path_factory.mktemp(name)
        model.save_pretrained(path)
        build_tokenizer().save_pretrained(path)
        out[name] = path
    return out


_loaded = {}


def load(path, device=None, **kwargs):
    """from_pretrained; CPU models are cached per (path, options) since they are only read."""
    if device is None:
        key = (str(path), tuple(sorted((k, str(v)) for k, v in kwargs.items())))
        if key not in _loaded:
            _loaded[key] = AutoModelForCausalLM.from_pretrained(path, **kwargs).eval()
        return _loaded[key]
    return AutoModelForCausalLM.from_pretrained(path, device_map=device, **kwargs).eval()


def prompt(batch=2, length=6, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (batch, length), generator=g)
    return ids, torch.ones_like(ids)


def greedy(model, ids, mask=None, static=False, **kwargs):
    device = model.device
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, **kwargs)
    if static:
        kwargs.update(cache_implementation="static", disable_compile=True)
    out = model.generate(ids.to(device), attention_mask=None if mask is None else mask.to(device), **kwargs)
    return out.cpu()


def assert_same_tokens(got, expected):
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert torch.equal(got, expected), f"device\n{got}\ncpu\n{expected}"


# ------------------------------------------------------------- loading


@pytest.mark.parametrize("device_map,device", [
    ("neuron", "neuron:0"),
    ("neuron:1", "neuron:1"),
    ({"": "neuron"}, "neuron:0"),
    (torch.device("neuron"), "neuron:0"),
], ids=["str", "str-index", "dict", "torch.device"])
def test_from_pretrained_device_maps(two_cores, saved, device_map, device):
    path = saved["qwen3"]
    model = load(path, device_map)
    assert {str(p.device) for p in model.parameters()} == {device}
    assert str(model.device) == device
    ids, mask = prompt()
    assert_same_tokens(greedy(model, ids, mask), greedy(load(path), ids, mask))


def test_from_config_then_to(saved):
    cpu = load(saved["llama"])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cpu.config)
    model.load_state_dict(cpu.state_dict())
    model = model.to("neuron").eval()
    assert model.device.type == "neuron"
    ids, mask = prompt()
    assert_same_tokens(greedy(model, ids, mask), greedy(cpu, ids, mask))


# ------------------------------------------------------------- greedy


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_greedy(saved, arch, static):
    path = saved[arch]
    model = load(path, "neuron")
    ids, mask = prompt()
    got = greedy(model, ids, mask, static=static)
    assert_same_tokens(got, greedy(load(path), ids, mask, static=static))
    if static:
        assert_same_tokens(got, greedy(model, ids, mask))  # the dynamic cache agrees


def test_static_cache_compiles_by_default(saved):
    model = load(saved["llama"], "neuron")
    ids, mask = prompt()
    got = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), max_new_tokens=NEW,
                         do_sample=False, cache_implementation="static")
    assert_same_tokens(got.cpu(), greedy(load(saved["llama"]), ids, mask))


# ------------------------------------------------------------- left padding


def padded_batch():
    width = max(len(r) for r in ROWS)
    ids = torch.tensor([[PAD] * (width - len(r)) + r for r in ROWS])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in ROWS])
    return ids, mask


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_left_padded_batch(saved, arch, static):
    path = saved[arch]
    model, cpu = load(path, "neuron"), load(path)
    ids, mask = padded_batch()
    got = greedy(model, ids, mask, static=static, pad_token_id=PAD)
    assert_same_tokens(got, greedy(cpu, ids, mask, static=static, pad_token_id=PAD))
    for i, row in enumerate(ROWS):
        alone = greedy(model, torch.tensor([row]), static=static, pad_token_id=PAD)
        assert_same_tokens(got[i:i + 1, -NEW:], alone[:, -NEW:])


# ------------------------------------------------------------- sampling


def sample(model, ids, mask, seed, **kwargs):
    torch.manual_seed(seed)
    kwargs = {**dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=True, temperature=1.0, top_k=0, top_p=1.0),
              **kwargs}
    return model.generate(ids.to(model.device), attention_mask=mask.to(model.device), **kwargs).cpu()


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
def test_sampling_is_reproducible_under_a_seed(saved, static):
    model = load(saved["qwen3"], "neuron")
    ids, mask = prompt(batch=3)
    kw = dict(cache_implementation="static", disable_compile=True) if static else {}
    first = sample(model, ids, mask, 1234, **kw)
    assert first.shape == (3, ids.shape[1] + NEW)
    assert torch.equal(first[:, :ids.shape[1]], ids)
    new = first[:, ids.shape[1]:]
    assert int(new.min()) >= 0 and int(new.max()) < VOCAB
    assert torch.equal(sample(model, ids, mask, 1234, **kw), first)
    # 24 draws from a near-uniform distribution over 128 tokens: another seed cannot repeat them all.
    assert not torch.equal(sample(model, ids, mask, 4321, **kw), first)


def test_top_k_one_sampling_equals_cpu_greedy(saved):
    path = saved["llama"]
    ids, mask = prompt()
    got = sample(load(path, "neuron"), ids, mask, 7, top_k=1)
    assert_same_tokens(got, greedy(load(path), ids, mask))


# ------------------------------------------------------------- pipeline


def test_text_generation_pipeline(saved):
    path = saved["qwen3"]
    tok = AutoTokenizer.from_pretrained(path)
    kwargs = dict(max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
    prompts = ["w5 w17 w33 w9", "w44 w8"]
    expected = pipeline("text-generation", model=load(path), tokenizer=tok, device="cpu")(prompts, **kwargs)

    model = load(path, "neuron")
    pipe = pipeline("text-generation", model=model, tokenizer=tok, device="neuron")
    assert pipe.device.type == "neuron" and pipe.model.device.type == "neuron"
    assert pipe(prompts, **kwargs) == expected
    assert pipe(prompts, batch_size=2, **kwargs) == expected  # a left-padded batch
    # A CPU model handed to a neuron pipeline is moved; a path is loaded there.
    cpu_model = AutoModelForCausalLM.from_pretrained(path).eval()
    moved = pipeline("text-generation", model=cpu_model, tokenizer=tok, device="neuron")
    assert moved.model.device.type == "neuron"
    assert moved(prompts[0], **kwargs) == expected[0]
    by_path = pipeline("text-generation", model=str(path), device="neuron")
    assert by_path.model.device.type == "neuron"
    assert by_path(prompts[0], **kwargs) == expected[0]
    assert all(len(e[0]["generated_text"].split()) > len(p.split()) for e, p in zip(expected, prompts))


# ------------------------------------------------------------- bfloat16


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_bfloat16_weights(saved, arch):
    path = saved[arch]
    model, cpu = load(path, "neuron", dtype=torch.bfloat16), load(path, dtype=torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    ids, mask = prompt()
    with torch.no_grad():
        got = model(ids.to("neuron"), attention_mask=mask.to("neuron")).logits.cpu()
        expected = cpu(ids, attention_mask=mask).logits
        exact = load(path)(ids, attention_mask=mask).logits
    assert got.dtype == torch.bfloat16
    # Kernels may round differently from CPU's (the device has its own attention), so the
    # measure is the float32 model: the device's bfloat16 run is about as close to it as CPU's.
    device_error = (got.float() - exact).abs().max().item()
    cpu_error = (expected.float() - exact).abs().max().item()
    assert device_error <= 2 * cpu_error, (device_error, cpu_error)
    assert_same_tokens(greedy(model, ids, mask), greedy(cpu, ids, mask))


# ------------------------------------------------------------- attention implementations


@pytest.mark.parametrize("static", [False, True], ids=["dynamic", "static"])
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_sdpa_and_eager_attention(saved, arch, static):
    path = saved[arch]
    ids, mask = padded_batch()
    tokens = {}
    for impl in ("sdpa", "eager"):
        model = load(path, "neuron", attn_implementation=impl)
        assert model.config._attn_implementation == impl
        tokens[impl] = greedy(model, ids, mask, static=static, pad_token_id=PAD)
        cpu = greedy(load(path, attn_implementation=impl), ids, mask, static=static, pad_token_id=PAD)
        assert_same_tokens(tokens[impl], cpu)
    assert_same_tokens(tokens["sdpa"], tokens["eager"])


# ------------------------------------------------------------- deferred stop check (adaptation 15)


def test_decoding_reads_its_stop_flag_one_step_late_on_neuron():
    from transformers.generation.utils import DeferredStopCheck

    neuron, cpu = torch.device("neuron"), torch.device("cpu")
    assert DeferredStopCheck.is_supported(neuron, None, False, is_assistant=False)
    assert not DeferredStopCheck.is_supported(neuron, None, False, is_assistant=True)
    assert not DeferredStopCheck.is_supported(cpu, None, False, is_assistant=False)
    # Fails once Transformers defers on neuron by itself: the adaptation is then unnecessary.
    assert not DeferredStopCheck.is_supported.__wrapped__(neuron, None, False, is_assistant=False)
    check = DeferredStopCheck(torch.zeros(2, 3, dtype=torch.long, device="neuron"), 10, None, False)
    host = [v for slot in check.slots for v in slot if isinstance(v, torch.Tensor)]
    assert len(host) == 4 and all(t.device.type == "cpu" and t.is_pinned() for t in host)
    # Elsewhere the flags stay as Transformers makes them.
    check = DeferredStopCheck(torch.zeros(2, 3, dtype=torch.long), 10, None, False)
    assert not any(v.is_pinned() for slot in check.slots for v in slot if isinstance(v, torch.Tensor))


class _Collect:
    """A streamer keeping what it is given (`generate` calls put/end like TextStreamer's)."""

    def __init__(self):
        self.chunks, self.ended = [], False

    def put(self, value):
        self.chunks.append(value.clone().cpu())

    def end(self):
        self.ended = True


@pytest.fixture
def undone(monkeypatch):
    """The steps each deferred stop check of the test reported as undone (DeferredStopCheck.finish)."""
    from transformers.generation.utils import DeferredStopCheck

    steps = []
    original_finish = DeferredStopCheck.finish
    monkeypatch.setattr(DeferredStopCheck, "finish", lambda self: steps.append(original_finish(self)) or steps[-1])
    return steps


def _stop_token(cpu, ids, mask, step):
    """A token CPU's greedy decoding produces in the first row at `step`: as EOS it stops that row early."""
    out = greedy(cpu, ids, mask)
    return int(out[0, ids.shape[1] + step])


@pytest.mark.parametrize("mode", ["dynamic", "static", "compiled"])
def test_an_early_eos_stop_equals_cpu_with_the_extra_step_undone(saved, undone, mode):
    path = saved["llama"]
    model, cpu = load(path, "neuron"), load(path)
    ids, mask = prompt(batch=1, seed=3)
    eos = _stop_token(cpu, ids, mask, step=2)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, eos_token_id=eos)
    if mode != "dynamic":
        kwargs["cache_implementation"] = "static"
    expected = cpu.generate(ids, attention_mask=mask, **kwargs, disable_compile=True)
    assert expected.shape[1] < ids.shape[1] + NEW  # CPU stopped early
    assert undone == []  # CPU reads its stop flag at once
    streamed, cpu_streamed = _Collect(), _Collect()
    cpu.generate(ids, attention_mask=mask, streamer=cpu_streamed, **kwargs, disable_compile=True)
    got = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), streamer=streamed,
                         disable_compile=mode != "compiled", **kwargs)
    assert_same_tokens(got.cpu(), expected)
    assert undone == [1]  # the device ran one step past the stop, and it was dropped
    assert streamed.ended and cpu_streamed.ended
    assert_same_tokens(torch.cat([c.reshape(-1) for c in streamed.chunks]),
                       torch.cat([c.reshape(-1) for c in cpu_streamed.chunks]))


def test_a_returned_cache_is_cropped_back_after_the_extra_step(saved, undone):
    path = saved["qwen3"]
    model, cpu = load(path, "neuron"), load(path)
    ids, mask = prompt(batch=1, seed=5)
    eos = _stop_token(cpu, ids, mask, step=3)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, eos_token_id=eos, return_dict_in_generate=True)
    expected = cpu.generate(ids, attention_mask=mask, **kwargs)
    got = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), **kwargs)
    assert expected.sequences.shape[1] < ids.shape[1] + NEW
    assert_same_tokens(got.sequences.cpu(), expected.sequences)
    assert undone == [1]
    assert got.past_key_values.get_seq_length() == expected.past_key_values.get_seq_length()
    for layer, cpu_layer in zip(got.past_key_values.layers, expected.past_key_values.layers):
        torch.testing.assert_close(layer.keys.cpu(), cpu_layer.keys)
        torch.testing.assert_close(layer.values.cpu(), cpu_layer.values)


def test_rows_of_a_batch_stopping_at_different_steps_equal_cpu(saved):
    path = saved["llama"]
    model, cpu = load(path, "neuron"), load(path)
    ids, mask = padded_batch()
    eos = _stop_token(cpu, ids, mask, step=1)
    kwargs = dict(max_new_tokens=NEW, do_sample=False, eos_token_id=eos, pad_token_id=PAD,
                  cache_implementation="static")
    expected = cpu.generate(ids, attention_mask=mask, **kwargs, disable_compile=True)
    assert (expected[1:, -NEW:] != PAD).any()  # the other rows went on
    got = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), **kwargs)
    assert_same_tokens(got.cpu(), expected)
