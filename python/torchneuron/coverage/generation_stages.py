"""generate_dynamic, generate_static, generate_padded, sample, sdpa_vs_eager and
pipeline: decoding, compared by the generated tokens or text."""
import torch

from .common import EXTRA_TOKENS, NEW_TOKENS, SEED, SEQ, compare_tokens
from .model_stages import eager_copy
from .tiny_configs import PAD, VOCAB

PROMPTS = ("t10 t20 t30 t40 t50 t60", "t70 t80 t90")


def generate_kwargs(model, static):
    # disable_compile: these stages measure eager decoding; with a static cache on a
    # `neuron` device Transformers (5.x) would torch.compile the decoding step with
    # the Dynamo backend "neuron" (`PreTrainedModel._default_compile_config`).
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
    """Greedy decoding of NEW_TOKENS tokens with the dynamic or the static cache (tokens equal)."""
    kwargs = {**generate_kwargs(model, static), **overrides}
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, **kwargs).detach()


def static_not_applicable(model):
    """Models that take no Cache instances (Transformers' `_supports_default_dynamic_cache()`)
    have no static cache either."""
    supports = getattr(model, "_supports_default_dynamic_cache", None)
    if supports is not None and not supports():
        return f"{type(model).__name__} keeps its own cache (no Cache instances), so no static cache"
    return None


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
    """A left-padded batch gives CPU's tokens, and each row generated alone on the
    device gives that row's tokens, wherever it does on CPU (where it does not,
    e.g. in RWKV, which ignores the attention mask, a note says so)."""
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
    """Sampling under `torch.manual_seed`: the same seed gives the same tokens twice
    on the device, and they are in the vocabulary. The device has its own
    generator, so equality with CPU's tokens is only recorded (`matches_cpu`)."""
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


def stage_sdpa_eager(model, padded):
    """The padded batch with the model's "sdpa" attention and with "eager"."""
    _, ids, mask = padded
    return extra_generate(model, ids, mask), extra_generate(eager_copy(model), ids, mask)


def compare_sdpa_eager(ref, got):
    """Both attentions give CPU's tokens, so they agree on the device wherever they agree on CPU."""
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


def stage_pipeline(model, device):
    """`pipeline("text-generation", ...)` with the word-level tokenizer, a left-padded
    batch of two prompts; the texts are compared with CPU's."""
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
