"""Tiny configurations derived from a config class's own defaults.

`derived_kwargs(config_class, default)` reads the class's default (full-size)
config and shrinks each size by the meaning of its key: widths to 64, heads to
4 (key/value heads keep the default's relation to the heads: as many, one, or
2), head dimensions to 16, feed-forward widths to 128, layers to 2, experts to 4
(2 per token, 1 shared, 2 expert groups where the default groups them), the
vocabulary to 256, positions to 256, windows to 8, state-space sizes to the
values of `tiny_configs.COMMON`. A size is never grown, and keys the default
does not set are left alone. Special tokens outside the tiny vocabulary move to
its top. The per-architecture table (`tiny_configs.ARCH`) then overrides what
cannot be derived.

`fit_layers` gives the tiny model one layer of every kind of the default's
per-layer pattern (a hybrid's attention and linear-attention layers, a model's
dense and sparse MLPs): by picking, from the default pattern, the first layer of
each kind where the class takes per-layer lists, or by adding layers (up to 8)
where the class derives its pattern from periods or indices.
"""
from .tiny_configs import BOS, COMMON, EOS, PAD, VOCAB

# Key -> tiny value, by meaning; the default's value is kept where it is smaller.
SIZES = {}
for _keys, _value in (
    # Widths of the residual stream and of embeddings that equal it in the full model.
    (("hidden_size", "d_model", "n_embd", "embed_dim", "emb_dim", "embedding_dim", "model_dim", "dim",
      "attention_hidden_size", "lru_width", "hidden_size_global", "out_hidden_size", "projector_input_dim",
      "projector_output_dim", "vision_output_dim", "adapter_in_dim", "adapter_out_dim", "backbone_hidden_size",
      "input_embedding_size", "output_embedding_size", "pronunciation_embed_dim", "shape_embed_dim",
      "ple_embed_dim", "router_hidden_size", "downsample_hidden_size", "conv_output_size",
      "vector_quantization_hidden_dimension", "mamba_d_ssm"), 64),
    (("word_embed_proj_dim", "embedding_size"), 64),
    # Attention heads, and the per-head width.
    (("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads", "decoder_attention_heads",
      "num_encoder_attention_heads", "num_decoder_attention_heads", "attention_heads", "swa_num_attention_heads",
      "linear_num_heads", "linear_num_value_heads"), 4),
    (("head_dim", "attention_head_size", "d_head", "d_kv", "dim_head", "kv_channels", "swa_head_dim",
      "linear_head_dim", "linear_key_head_dim", "linear_value_head_dim", "index_head_dim", "attention_head_dim",
      "mamba_d_head", "mamba_head_dim", "mamba_headdim", "v_head_dim"), 16),
    (("global_head_dim",), 32),
    (("index_n_heads", "linear_num_key_heads"), 2),
    # Multi-head latent attention: low ranks and the rope / no-rope split of a 16-wide head.
    (("kv_lora_rank", "o_lora_rank"), 16),
    (("q_lora_rank",), 32),
    (("qk_rope_head_dim", "qk_nope_head_dim", "rotary_dim"), 8),
    # Feed-forward widths: dense, per expert, shared expert.
    (("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "n_inner", "ffn_hidden_size", "dff",
      "d_ff", "dim_ff", "d_inner", "feed_forward_size", "intermediate_size_mlp", "dense_intermediate_size",
      "mlp_dim"), 128),
    (("moe_intermediate_size", "expert_ffn_hidden_size", "expert_intermediate_size"), 32),
    (("shared_intermediate_size", "shared_expert_intermediate_size", "shared_experts_intermediate_size",
      "moe_shared_expert_intermediate_size"), 64),
    # Depth.
    (("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
      "num_encoder_layers", "num_decoder_layers", "depth", "num_layers_per_stack", "conf_num_hidden_layers"), 2),
    # Mixture of experts.
    (("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"), 4),
    (("num_experts_per_tok", "moe_topk", "moe_top_k"), 2),
    (("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"), 1),
    (("zero_expert_num",), 2),
    # Layers before the first sparse (or sliding) one: one, so that both kinds are there.
    (("first_k_dense_replace", "num_dense_layers", "moe_layer_start_index", "max_window_layers",
      "moe_layer_end_index"), 1),
    # Vocabularies and positions.
    (("vocab_size", "decoder_vocab_size", "vocab_size_per_layer_input", "pronunciation_vocab_size",
      "shape_vocab_size", "unpadded_vocab_size"), VOCAB),
    (("max_position_embeddings", "n_positions", "n_ctx", "max_target_positions", "max_seq_len", "context_length",
      "max_source_positions"), 256),
    # Windows shorter than prompt + generated tokens, so that they matter.
    (("sliding_window", "sliding_window_size", "attention_window_size", "local_attention_window_len",
      "attention_chunk_size"), 8),
    # Sparse attention: keys picked per query.
    (("index_topk",), 4),
    # State-space layers.
    (("mamba_d_state", "state_size", "ssm_state_size"), 16),
    (("time_step_rank", "mamba_dt_rank"), 8),
    # Small side paths: per-layer embeddings, low-rank adapters.
    (("hidden_size_per_layer_input", "laurel_rank", "adapter_rank", "hc_lowrank"), 8),
):
    SIZES.update(dict.fromkeys(_keys, _value))

# Key/value heads: as many as the heads (multi-head), one (multi-query), else 2.
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "kv_n_heads", "swa_num_key_value_heads",
            "num_query_groups", "multi_query_group_num")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")


class Required:
    """A derived value that is a constraint of the class, so it wins over tiny_configs.COMMON."""

    def __init__(self, value):
        self.value = value
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
# Per-layer patterns whose kinds the tiny model keeps (Jamba's is a property).
PATTERNS = ("layer_types", "layers_block_type", "block_types", "mlp_layer_types")
MAX_LAYERS = 8


def default_config(config_class):
    """The class's default (full-size) config, or None where the defaults do not validate."""
    try:
        return config_class()
    except Exception:  # noqa: BLE001 - a class whose defaults are invalid: nothing to derive from
        return None


def _fields(config_class, given=False):
    """The class's field names; with `given`, only those with a default of their own (a
    field whose default is None gets its value from the others in __post_init__)."""
    import dataclasses

    if not dataclasses.is_dataclass(config_class):
        return set()
    return {f.name for f in dataclasses.fields(config_class) if not given or f.default is not None}


def _is_token_key(key):
    return key.endswith(("_token_id", "_token_index", "_token_ids"))


def _kv_heads(values, value, heads):
    full_heads = next((values[k] for k in HEAD_KEYS if isinstance(values.get(k), int)), None)
    if value == 1:
        return 1
    if full_heads is not None and value == full_heads:
        return heads
    return min(value, 2)


def derived_kwargs(config_class, default):
    """Shrunk values of the keys the default config sets (no sub-configs, no layer patterns)."""
    from transformers import PretrainedConfig

    if default is None:
        return {}
    fields = _fields(config_class, given=True)
    values = {k: v for k, v in vars(default).items() if k in fields and not k.startswith("_")}
    kwargs = {}
    for key, value in values.items():
        if isinstance(value, bool) or isinstance(value, PretrainedConfig):
            continue
        if isinstance(value, int) and key in SIZES and value > SIZES[key]:
            kwargs[key] = SIZES[key]
    # Other widths that equal the full model's hidden or feed-forward width follow it
    # (a sub-model's adapter input is the hidden size, say).
    for width in ("hidden_size", "intermediate_size"):
        full = values.get(width)
        if not isinstance(full, int) or isinstance(full, bool) or width not in kwargs:
            continue
        for key, value in values.items():
            if key not in SIZES and key.endswith(("_size", "_dim")) and value == full and not isinstance(value, bool):
                kwargs[key] = kwargs[width]
    heads = kwargs.get("num_attention_heads", values.get("num_attention_heads"))
    for key in KV_HEADS:
        if isinstance(values.get(key), int) and not isinstance(values.get(key), bool):
            kwargs[key] = _kv_heads(values, values[key], heads if isinstance(heads, int) else 4)
    # COMMON never grows a count beyond the full model's (ZAYA routes each token to one expert).
    for key in ("num_experts_per_tok", "n_shared_experts", "num_shared_experts"):
        if isinstance(values.get(key), int) and 0 < values[key] < COMMON.get(key, 0):
            kwargs[key] = Required(values[key])
    if "kv_lora_rank" in values and "num_key_value_heads" in kwargs:
        # Multi-head latent attention: as many key/value heads as heads.
        kwargs["num_key_value_heads"] = Required(kwargs["num_key_value_heads"])
    # Expert groups: two groups of two where the default groups its experts.
    if isinstance(values.get("n_group"), int) and values["n_group"] > 1:
        kwargs.update(n_group=2, topk_group=1)
    kwargs.update(_tokens(values, kwargs.get("vocab_size", values.get("vocab_size"))))
    return kwargs


def _tokens(values, vocab):
    """Special tokens inside the tiny vocabulary: bos/eos/pad as the listed architectures
    have them, any other token id beyond it at the vocabulary's top."""
    if not isinstance(vocab, int):
        vocab = VOCAB
    fixed = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD}
    out, top = {}, vocab - 1
    for key, value in sorted(values.items()):
        if not _is_token_key(key) or value is None:
            continue
        ids = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(t, int) for t in ids) or all(0 <= t < vocab for t in ids):
            continue
        if key in fixed:
            out[key] = fixed[key]
            continue
        moved = []
        for _ in ids:
            moved.append(top)
            top -= 1
        out[key] = moved if isinstance(value, (list, tuple)) else moved[0]
    return out


def _get(config, name):
    """An attribute, or None where the config has none or guards it (per-layer attributes
    of heterogeneous configs raise on global access)."""
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001
        return vars(config).get(name)


def layer_key(kwargs, default):
    for key in LAYER_KEYS:
        if key in kwargs or isinstance(_get(default, key), int):
            return key
    return None


def pattern_kinds(config):
    kinds = set()
    for name in PATTERNS:
        types = _get(config, name)
        if isinstance(types, (list, tuple)):
            kinds.update((name, t) for t in types if isinstance(t, str))
    return kinds


def fit_layers(config_class, default, kwargs, build):
    """kwargs with a layer of every kind of the default pattern (see the module doc);
    `build(kwargs)` makes a config."""
    if default is None:
        return kwargs
    wanted = pattern_kinds(default)
    key = layer_key(kwargs, default)
    if not wanted or key is None:
        return kwargs
    try:
        if pattern_kinds(build(kwargs)) >= wanted:
            return kwargs
    except Exception:  # noqa: BLE001 - try the fitted pattern instead
        pass
    full = _get(default, key)
    lists = {name: value for name, value in vars(default).items()
             if name in _fields(config_class) and isinstance(value, list) and len(value) == full}
    if any(name in lists for name in PATTERNS):
        # The first layer of each kind, in the default's order.
        first = {}
        for name in PATTERNS:
            for i, kind in enumerate(lists.get(name) or []):
                first.setdefault((name, kind), i)
        picked = sorted(set(first.values()))
        for i in range(full):  # at least as many layers as the tiny default
            if len(picked) >= kwargs.get(key, 2):
                break
            if i not in picked:
                picked = sorted(picked + [i])
        fitted = dict(kwargs, **{key: len(picked)})
        for name, values in lists.items():
            values = [values[i] for i in picked]
            if name in SIZES:  # per-layer widths (Gemma 3n's intermediate sizes) shrink as one width does
                values = [min(v, SIZES[name]) if isinstance(v, int) else v for v in values]
            fitted[name] = values
        return fitted
    for n in range(kwargs.get(key, 2) + 1, MAX_LAYERS + 1):
        fitted = dict(kwargs, **{key: n})
        try:
            if pattern_kinds(build(fitted)) >= wanted:
                return fitted
        except Exception:  # noqa: BLE001 - more layers may still fit
            continue
    return kwargs
