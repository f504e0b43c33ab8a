"""Tiny random configurations for the Hugging Face causal-LM architectures.

`build_config(row)` turns one row of the architecture list (model_type,
causal_lm_class, config_class, special_needs) into a small config of the
architecture's own config class: hidden size 64, 2 layers (more only where an
architecture needs them to show its special feature), 4 heads, vocabulary 256,
a few experts, special tokens inside the vocabulary, and layer type lists that
cover every kind of layer the architecture has.

`COMMON` holds the values tried for every architecture; a key is passed only when
the config class declares it (as a field or through its `attribute_map`), because
config classes accept and keep unknown keys silently. `ARCH` holds the
per-architecture values, read from each config class and its modeling code in
the installed Transformers; `DROP` removes a common key for one architecture.
"""
import dataclasses

VOCAB = 256
BOS, EOS, PAD = 1, 2, 0

# Values for every architecture whose config class knows the key.
COMMON = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "bos_token_id": BOS,
    "eos_token_id": EOS,
    "pad_token_id": PAD,
    "tie_word_embeddings": None,  # None: keep the class default
    # Mixture of experts
    "moe_intermediate_size": 32,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "shared_intermediate_size": 64,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    # Sliding windows shorter than prompt + generated tokens, so they matter
    "sliding_window": 8,
    # Multi-head latent attention (MLA)
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    # State-space layers
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_chunk_size": 4,
    "chunk_size": 4,
    "state_size": 16,
    "time_step_rank": 8,
}

DROP = object()

SW_FULL = ["sliding_attention", "full_attention"]

# Per-architecture values (override COMMON; DROP removes a COMMON key).
ARCH = {
    "qwen3": dict(use_sliding_window=True, max_window_layers=1),
    "llama": dict(
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
        }
    ),
    "qwen2": dict(use_sliding_window=True, max_window_layers=1),
    "gpt2": dict(n_inner=128),
    "qwen3_5_text": dict(
        layer_types=["linear_attention", "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
    ),
    "gemma3_text": dict(layer_types=SW_FULL, query_pre_attn_scalar=16),
    "qwen3_moe": dict(decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True),
    "gpt_oss": dict(
        layer_types=SW_FULL, intermediate_size=32,
        rope_parameters={
            "rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
            "original_max_position_embeddings": 64, "rope_theta": 150000.0,
        },
    ),
    # 4 layers so that the last two share the key/value states of the first two (KV sharing
    # needs an earlier layer of the same type); per-layer embeddings (PLE) are small.
    "gemma4_text": dict(
        num_hidden_layers=4, layer_types=SW_FULL * 2, num_kv_shared_layers=2,
        global_head_dim=32, vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8,
        final_logit_softcapping=30.0,
    ),
    "gemma2": dict(layer_types=SW_FULL, query_pre_attn_scalar=16),
    "deepseek_v3": dict(
        num_key_value_heads=4, n_group=2, topk_group=1, num_experts_per_tok=2,
        rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
        },
    ),
    "opt": dict(ffn_dim=128, word_embed_proj_dim=32),
    "phi": dict(num_key_value_heads=4, qk_layernorm=True),
    "mixtral": dict(),
    "granite": dict(
        embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.22, attention_multiplier=0.0625,
    ),
    "granitemoehybrid": dict(
        layer_types=["linear_attention", "full_attention"], mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1,
        embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.22, attention_multiplier=0.0625,
    ),
    "falcon": dict(ffn_hidden_size=128, num_kv_heads=1, multi_query=True, new_decoder_architecture=False),
    "gpt_bigcode": dict(n_inner=128, multi_query=True),
    "lfm2": dict(
        layer_types=["conv", "full_attention"], block_multiple_of=16, block_auto_adjust_ff_dim=False,
        conv_L_cache=3,
    ),
    "glm4_moe": dict(use_qk_norm=True),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=8),
    "deepseek_v2": dict(num_key_value_heads=4, head_dim=8, topk_method="greedy", n_group=DROP, topk_group=DROP),
    "glm4": dict(),
    "minimax_m2": dict(),
    "falcon_h1": dict(
        mamba_d_ssm=64, mamba_n_heads=8, mamba_d_head=8, mamba_n_groups=1,
        lm_head_multiplier=0.5, embedding_multiplier=2.0, key_multiplier=0.5,
    ),
    "olmo3": dict(layer_types=SW_FULL),
    "cohere": dict(use_qk_norm=True),
    "mamba": dict(expand=2, conv_kernel=4),
    "ministral": dict(layer_types=SW_FULL),
    "olmo": dict(clip_qkv=8.0),
    "exaone4": dict(layer_types=SW_FULL, sliding_window_pattern=2),
    "ernie4_5_moe": dict(
        moe_num_shared_experts=1, moe_layer_start_index=1, moe_layer_end_index=1, moe_layer_interval=1,
    ),
    "hunyuan_v1_dense": dict(eod_token_id=3),
    "seed_oss": dict(),
    "granitemoe": dict(
        embedding_multiplier=12.0, logits_scaling=8.0, residual_multiplier=0.22, attention_multiplier=0.0625,
    ),
    "mamba2": dict(num_heads=8, head_dim=16, n_groups=2, expand=2, conv_kernel=4),
    "phimoe": dict(),
    "bitnet": dict(),
    "arcee": dict(),
    "afmoe": dict(num_dense_layers=1, global_attn_every_n_layers=2, layer_types=SW_FULL),
    "glm_moe_dsa": dict(
        num_key_value_heads=4, index_topk=4, index_head_dim=16, index_n_heads=2,
        mlp_layer_types=["dense", "sparse"], layer_types=["indexed_attention", "indexed_attention"],
        indexer_types=["full", "shared"], head_dim=DROP,
    ),
    # Values of the Transformers test suite's own tiny DeepSeek-V4.
    "deepseek_v4": dict(
        num_key_value_heads=1, moe_intermediate_size=64, head_dim=32, partial_rotary_factor=0.25,
        q_lora_rank=32, o_groups=2, o_lora_rank=16, mlp_layer_types=["hash_moe", "moe"],
        layer_types=["heavily_compressed_attention", "compressed_sparse_attention"],
        hc_mult=2, hc_sinkhorn_iters=3, index_n_heads=2, index_head_dim=16, index_topk=2,
        num_nextn_predict_layers=0, qk_rope_head_dim=DROP,
    ),
    "codegen": dict(rotary_dim=8, n_ctx=256, n_inner=128),
    "dbrx": dict(
        # The attention reads attn_config.rope_theta, which DbrxAttentionConfig does not declare.
        attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 10000.0},
        ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2},
        num_key_value_heads=DROP, head_dim=DROP,
    ),
    "zamba2": dict(
        layers_block_type=["linear_attention", "hybrid"], n_mamba_heads=8, mamba_ngroups=1,
        use_mamba_kernels=False, num_mem_blocks=1, use_shared_attention_adapter=True, adapter_rank=8,
        use_mem_rope=True, head_dim=DROP, num_key_value_heads=4,  # the adapters need as many kv heads as heads
    ),
    "helium": dict(),
    "dots1": dict(max_window_layers=1),
    "mimo_v2_flash": dict(
        layer_types=["full_attention", "sliding_attention"], mlp_layer_types=["dense", "sparse"],
        head_dim=24, v_head_dim=16, sliding_window=9,
    ),
    "exaone_moe": dict(layer_types=SW_FULL, mlp_layer_types=["dense", "sparse"], sliding_window_pattern=2),
    "vaultgemma": dict(layer_types=SW_FULL, query_pre_attn_scalar=16),
    "biogpt": dict(),
    "rwkv": dict(attention_hidden_size=64, context_length=256, rescale_every=0),
    "openai-gpt": dict(),
    "olmo_hybrid": dict(
        layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=32,
    ),
    # 4 layers: the shared transformer block is tied across hybrid layers, so two are needed.
    "zamba": dict(
        num_hidden_layers=4, layers_block_type=["linear_attention", "hybrid"] * 2, n_mamba_heads=2, mamba_dt_rank=8,
        use_mamba_kernels=False, head_dim=DROP, num_key_value_heads=4,
    ),
    "jetmoe": dict(head_dim=16, num_key_value_heads=2),
    "cwm": dict(
        layer_types=["full_attention", "sliding_attention"],
        rope_parameters={
            "rope_type": "llama3", "rope_theta": 1000000.0, "factor": 16.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
        },
    ),
    "solar_open": dict(),
    "nanochat": dict(num_key_value_heads=4),
    "minicpm3": dict(num_key_value_heads=4, head_dim=16),
    # Hybrids: with 2 layers their default patterns are all linear attention (or recurrent,
    # or Mamba), and a cache with no attention layer cannot tell its length; one of each.
    "qwen3_next": dict(
        layer_types=["linear_attention", "full_attention"], decoder_sparse_step=1, mlp_only_layers=[],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
    ),
    "qwen3_5_moe_text": dict(
        layer_types=["linear_attention", "full_attention"],
        linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4,
    ),
    "jamba": dict(
        attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1,
        use_mamba_kernels=False, mamba_dt_rank=8,
    ),
    "bamba": dict(attn_layer_indices=[1], mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1),
    "recurrent_gemma": dict(block_types=["recurrent", "attention"], lru_width=64, attention_window_size=8),
    # Rotary and head sizes that divide: GPT-J rotates rotary_dim (default 64) of each 16-wide head.
    "gptj": dict(rotary_dim=8, n_inner=128),
    # Multi-head latent attention has as many key/value heads as heads (as deepseek_v3 above);
    # Glm4MoeLite aliases head_dim to qk_rope_head_dim.
    "glm4_moe_lite": dict(num_key_value_heads=4, head_dim=DROP),
    "deepseek_v32": dict(num_key_value_heads=4, head_dim=16, index_topk=4, index_head_dim=16, index_n_heads=2),
    # Layers are `num_layers` here; the rotary embedding is head_dim wide, which must be
    # qk_rope_head_dim (as in the defaults); zero-compute experts (default 256) fewer than the 4 routed.
    "longcat_flash": dict(num_layers=2, num_key_value_heads=4, head_dim=8, zero_expert_num=2),
    # 4 layers so that the last two share the key/value states of the first two (as gemma4_text);
    # every per-layer list has one entry per layer.
    "gemma3n_text": dict(
        num_hidden_layers=4, layer_types=SW_FULL * 2, num_kv_shared_layers=2, intermediate_size=[128] * 4,
        activation_sparsity_pattern=[0.95, 0.0, 0.0, 0.0], vocab_size_per_layer_input=VOCAB,
        hidden_size_per_layer_input=8, laurel_rank=8, altup_num_inputs=2,
    ),
    # Without layer_types the builder crashes; one convolution and one attention layer,
    # the first dense and the second a mixture of experts.
    "lfm2_moe": dict(layer_types=["conv", "full_attention"], num_dense_layers=1, conv_L_cache=3),
    # Beyond the two lists (the whole causal-LM auto mapping): what the defaults cannot give.
    # X-MOD picks a language adapter per input; the default config names no default language.
    "xmod": dict(default_language="en_XX"),
    # The modeling code reads rope_parameters per layer type, which the defaults do not give.
    "cohere_compass_text": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
    # The native (torch) chunkwise mLSTM kernel assumes query/key heads as wide as value heads
    # (the default qk_dim_factor 0.5 fails on CPU at any size).
    "xlstm": dict(qk_dim_factor=1.0),
    # The assistant's defaults fail its own validation: it has no per-layer inputs, and it
    # shares every layer's keys and values (read from a target model's).
    "gemma4_assistant": dict(text_config=dict(
        model_type="gemma4_text", hidden_size_per_layer_input=0, vocab_size_per_layer_input=0, num_kv_shared_layers=4,
    )),
    # The sliding-window layers take their sizes from swa_* keyword arguments that are not
    # fields (so not derived): full size by default.
    "dots3_note_text": dict(
        swa_num_attention_heads=4, swa_num_key_value_heads=4, swa_q_lora_rank=32, swa_kv_lora_rank=16,
        swa_head_dim=16, swa_qk_nope_head_dim=8, swa_v_head_dim=16,
    ),
    # ReformerModelWithLMHead asserts a decoder config (the defaults are an encoder's); the axial
    # position embeddings' widths sum to the hidden size, their shape multiplies to the positions.
    "reformer": dict(is_decoder=True, axial_pos_embds_dim=[16, 48], axial_pos_shape=[16, 16]),
    # Indexed-attention layers need the QSA indexer's sizes, which the defaults leave unset
    # (the config then fails at model build); the indexer takes one key/value head.
    "qwen4_exp_text": dict(
        indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16, indexer_budget=4, indexer_compress_ratio=2,
    ),
    # The stages feed one token row per sequence: one codebook (the default 4 would fold the
    # batch of 2 into codebooks). generate() starts each codebook's delay pattern from the
    # decoder start token, which the checkpoints' generation configs give (there the bos token).
    "musicgen_decoder": dict(num_codebooks=1, decoder_start_token_id=BOS),
    "musicgen_melody_decoder": dict(num_codebooks=1, decoder_start_token_id=BOS),
}


def config_keys(config_class):
    """Names a config class really takes: its dataclass fields and its attribute_map keys."""
    names = set()
    if dataclasses.is_dataclass(config_class):
        names.update(f.name for f in dataclasses.fields(config_class))
    names.update(getattr(config_class, "attribute_map", {}) or {})
    return names


def tiny_kwargs(model_type, config_class, derived=None):
    """The keyword arguments of the tiny config of one architecture: COMMON, then the
    `derived` values (derive.derived_kwargs) for keys COMMON does not set, then ARCH."""
    from .derive import Required

    known = config_keys(config_class)
    # Aliases are stored under their field names: a config applies aliased keyword
    # arguments only after its __post_init__, too late for values derived there.
    alias = getattr(config_class, "attribute_map", {}) or {}
    kwargs = {}
    for key, value in COMMON.items():
        if key in known and value is not None:
            kwargs.setdefault(alias.get(key, key), value)
    for key, value in (derived or {}).items():
        if isinstance(value, Required):
            kwargs[alias.get(key, key)] = value.value
        else:
            kwargs.setdefault(alias.get(key, key), value)
    for key, value in ARCH.get(model_type, {}).items():
        if value is DROP:
            kwargs.pop(alias.get(key, key), None)
        else:
            kwargs[alias.get(key, key)] = value
    return kwargs


def config_kwargs(model_type, config_class):
    """tiny_kwargs from the class's own defaults, with tiny sub-configs (each by the
    entry of its own model_type) and a layer of every kind of the default pattern."""
    from transformers import AutoConfig

    from .derive import default_config, derived_kwargs, fit_layers

    default = default_config(config_class)
    kwargs = tiny_kwargs(model_type, config_class, derived_kwargs(config_class, default))
    for name, declared in (getattr(config_class, "sub_configs", None) or {}).items():
        sub_class = sub_config_class(declared, default, name, kwargs.get(name))
        if sub_class is None or not isinstance(kwargs.get(name, {}), dict):
            continue
        # ARCH's values for a sub-config go over the sub-config's own tiny values.
        kwargs[name] = dict(config_kwargs(sub_class.model_type, sub_class), **kwargs.get(name, {}))
        if getattr(declared, "config_class", declared) is AutoConfig:  # the composite picks the class by this key
            kwargs[name]["model_type"] = sub_class.model_type
    return fit_layers(config_class, default, kwargs, lambda kw: config_class(**kw))


def sub_config_class(declared, default, name, given=None):
    """The class of a sub-config: that of the default's (None where the default leaves it
    out), else, for a class without valid defaults, the declared one (a class, or a spec
    or ARCH's values naming an AutoConfig model_type)."""
    from transformers import AutoConfig, PretrainedConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if default is not None:
        sub = getattr(default, name, None)
        return type(sub) if isinstance(sub, PretrainedConfig) else None
    cls = getattr(declared, "config_class", declared)
    if cls is AutoConfig:
        model_type = getattr(declared, "model_type", None) or (given or {}).get("model_type")
        return CONFIG_MAPPING[model_type] if model_type else None
    return cls


def build_config(row):
    """Returns (config, kwargs) for one row of the architecture list."""
    import transformers

    config_class = getattr(transformers, row["config_class"])
    kwargs = config_kwargs(row["model_type"], config_class)
    config = config_class(**kwargs)
    return config, kwargs


def check_config(config):
    """Problems of a built config that make a comparison meaningless (empty if fine)."""
    problems = []
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None)
    for name in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(text, name, None)
        ids = value if isinstance(value, (list, tuple)) else [value]
        for token in ids:
            if token is not None and vocab is not None and not 0 <= token < vocab:
                problems.append(f"{name}={value} outside the vocabulary of {vocab}")
    layers = getattr(text, "num_hidden_layers", None)
    for name in ("layer_types", "mlp_layer_types"):
        try:
            types = getattr(text, name, None)
        except Exception:  # some configs guard per-layer attributes
            types = None
        if isinstance(types, (list, tuple)) and layers is not None and len(types) != layers:
            problems.append(f"{name} has {len(types)} entries for {layers} layers")
    missing = missing_layer_kinds(type(text), text)
    if missing:
        problems.append(f"no layer of the kinds {missing} of the full-size pattern (every kind needs one: a hybrid "
                        "whose layers are all linear attention has a cache that cannot tell its length)")
    return problems


# Per-layer pattern attributes of the config classes (properties on some, e.g. Jamba's).
LAYER_PATTERNS = ("layer_types", "layers_block_type", "block_types")


def layer_kinds(config):
    kinds = set()
    for name in LAYER_PATTERNS:
        try:
            types = getattr(config, name, None)
        except Exception:  # some configs guard per-layer attributes
            types = None
        if isinstance(types, (list, tuple)):
            kinds.update(t for t in types if isinstance(t, str))
    return kinds


def missing_layer_kinds(config_class, config):
    """The kinds of layer the class's default (full-size) pattern has and `config` lacks."""
    try:
        default = config_class()
    except Exception:  # a class without usable defaults: nothing to compare with
        return []
    return sorted(layer_kinds(default) - layer_kinds(config))
