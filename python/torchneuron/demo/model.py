"""The model: a small Qwen3 (GQA, RoPE, RMSNorm, q/k norms, tied embeddings as
in the small Qwen3 chat models) built from a config with fresh random weights,
sized for the tokenizer's vocabulary and saved as the checkpoint the
fine-tune starts from."""
import torch
from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config


def build_model(tokenizer, hidden=128, layers=2, heads=8, kv_heads=4, max_positions=64, seed=0):
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
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    # Saved with the checkpoint, so the trained and reloaded models generate the same way.
    model.generation_config = GenerationConfig(
        do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return model
