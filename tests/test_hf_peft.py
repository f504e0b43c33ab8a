"""PEFT on neuron, as a user's script calls it: LoRA and DoRA adapters on a tiny
Llama trained a few steps, saved, loaded back with `PeftModel.from_pretrained`
onto neuron and merged, against the same script on CPU; PEFT's own device
choice (hf_integration adaptations 11 and 12)."""
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


def tiny_llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


IDS = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(1))


def dora_run(device, adapter_dir):
    """DoRA (weight-decomposed LoRA) trained a few steps, its adapters saved."""
    dora = peft.LoraConfig(r=4, lora_alpha=8, use_dora=True, target_modules=["q_proj", "v_proj"],
                           task_type="CAUSAL_LM")
    model = peft.get_peft_model(tiny_llama(), dora).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = IDS.to(device)
    losses = []
    for _ in range(3):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    model.save_pretrained(adapter_dir)
    with torch.no_grad():
        return torch.tensor(losses), model(input_ids=ids).logits.cpu()


def test_peft_infers_the_neuron_device():
    """Adaptation 11; the original (`__wrapped__`) still answers "cpu" here: if a PEFT
    upgrade learns the device, this fails and the adaptation can go."""
    from peft.utils.other import infer_device

    assert peft.utils.infer_device() == "neuron"
    assert infer_device.__wrapped__() == "cpu"


def test_dora_training_save_load_onto_neuron_and_merge_match_cpu(tmp_path):
    cpu_losses, cpu_logits = dora_run("cpu", tmp_path / "cpu")
    losses, logits = dora_run(D, tmp_path / "neuron")
    torch.testing.assert_close(losses, cpu_losses)
    assert losses[-1] < losses[0]
    torch.testing.assert_close(logits, cpu_logits)

    # Loaded as users do: the base model on the device, the adapters from the directory,
    # read onto the device PEFT infers (adaptations 11 and 12).
    loaded = peft.PeftModel.from_pretrained(tiny_llama().to(D), tmp_path / "neuron")
    assert {p.device.type for p in loaded.parameters()} == {D}
    assert loaded.peft_config["default"].use_dora
    with torch.no_grad():
        got = loaded(input_ids=IDS.to(D)).logits.cpu()
        torch.testing.assert_close(got, logits)
        merged = loaded.merge_and_unload()
        assert type(merged).__name__ == "LlamaForCausalLM"
        torch.testing.assert_close(merged(input_ids=IDS.to(D)).logits.cpu(), cpu_logits, atol=1e-4, rtol=1e-4)

    # A base model on CPU keeps everything on CPU, with the neuron-trained adapters.
    on_cpu = peft.PeftModel.from_pretrained(tiny_llama(), tmp_path / "neuron")
    assert {p.device.type for p in on_cpu.parameters()} == {"cpu"}
    with torch.no_grad():
        torch.testing.assert_close(on_cpu(input_ids=IDS).logits, cpu_logits)


def test_safetensors_loads_onto_neuron(tmp_path):
    """Adaptation 12: `load_file(device="neuron...")`; the original still refuses the name."""
    import safetensors
    from safetensors.torch import load_file, save_file

    tensors = {"w": torch.randn(3, 4), "b": torch.arange(5)}
    save_file(tensors, tmp_path / "t.safetensors")
    for device in ("neuron", "neuron:1", torch.device(D, 1)):
        loaded = load_file(tmp_path / "t.safetensors", device=device)
        assert loaded.keys() == tensors.keys()
        for name, t in tensors.items():
            assert loaded[name].device == torch.device(device) or str(device) == D
            assert loaded[name].device.type == D and torch.equal(loaded[name].cpu(), t)
    assert load_file(tmp_path / "t.safetensors", device="neuron:1")["w"].device.index == 1
    assert load_file(tmp_path / "t.safetensors")["w"].device.type == "cpu"
    with pytest.raises(safetensors.SafetensorError, match="device neuron is invalid"):
        load_file.__wrapped__(tmp_path / "t.safetensors", device="neuron")
