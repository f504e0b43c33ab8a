"""The model: a small Qwen3 (GQA, RoPE, RMSNorm, q/k norms) built from a config
with fresh random weights, sized for the task's vocabulary."""
from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config


def build_model(tokenizer, hidden=128, layers=2, heads=8, kv_heads=4, max_positions=32):
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden // heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    # Saved with the checkpoint, so the reloaded model generates the same way.
    model.generation_config = GenerationConfig(
        do_sample=False, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    return model
