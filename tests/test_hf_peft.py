"""PEFT on neuron, as a user's script calls it: LoRA adapters on a tiny Llama
trained a few steps, then merged, against the same script on CPU."""
import pytest
import torch

import torchneuron  # noqa: F401

import peft
from transformers import LlamaConfig, LlamaForCausalLM

# PEFT asks Transformers a deprecated question (is_gradient_checkpointing).
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated")

D = "neuron"


def lora_run(device):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                           lora_dropout=0.0, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora)
    # LoRA's B starts at zero: give it values so that the adapters change the outputs.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape) * 0.1)
    model = model.to(device)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1)).to(device)
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    with torch.no_grad():
        adapted = model(input_ids=ids).logits.cpu()
        merged = model.merge_and_unload()
        merged_logits = merged(input_ids=ids).logits.cpu()
    return losses, adapted, merged_logits, type(merged).__name__


def test_lora_training_and_merge_match_cpu():
    cpu_losses, cpu_adapted, cpu_merged, _ = lora_run("cpu")
    losses, adapted, merged, kind = lora_run(D)
    assert kind == "LlamaForCausalLM"  # merge_and_unload returns the plain model
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses))
    assert losses[-1] < losses[0]
    torch.testing.assert_close(adapted, cpu_adapted)
    torch.testing.assert_close(merged, cpu_merged)
    torch.testing.assert_close(merged, adapted, atol=1e-4, rtol=1e-4)  # merging keeps the function
