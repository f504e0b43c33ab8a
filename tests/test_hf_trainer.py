"""Transformers' Trainer on neuron, as a user's script calls it: nothing names the
device (`TrainingArguments().device` is neuron:0, hf_integration adaptation 8),
and each run is compared with the same script on CPU (`use_cpu=True`): train,
evaluate, predict, gradient accumulation, gradient checkpointing, bf16 mixed
precision; checkpoints hold the neuron generators and a resumed run gives the
uninterrupted run's losses (adaptation 10). Tiny models with random weights;
datasets made with `datasets.Dataset.from_dict`."""
import os

import numpy as np
import pytest
import torch

import torchneuron  # noqa: F401

datasets = pytest.importorskip("datasets", reason="datasets (requirements.txt) is not installed")
from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
)

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # deprecations inside Transformers

VOCAB = 64


def token_dataset(rows, seed):
    ids = torch.randint(0, VOCAB, (rows, 16), generator=torch.Generator().manual_seed(seed)).tolist()
    return datasets.Dataset.from_dict({"input_ids": ids, "labels": ids})


def tiny_llama():
    """No dropout by default: neuron and CPU compute the same function."""
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        bos_token_id=0, eos_token_id=1, pad_token_id=2))


def tiny_gpt2():
    """GPT-2's defaults have dropout (0.1) everywhere: the device's generator matters."""
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                      bos_token_id=0, eos_token_id=1))


def train(device, tmp_path, model=tiny_llama, steps=4, resume=None, **overrides):
    settings = dict(per_device_train_batch_size=4, learning_rate=1e-3, logging_steps=1, report_to="none",
                    save_strategy="no")
    args = TrainingArguments(output_dir=str(tmp_path / f"out-{device}"), max_steps=steps, use_cpu=device == "cpu",
                             **{**settings, **overrides})
    trainer = Trainer(model=model(), args=args, train_dataset=token_dataset(32, 0), eval_dataset=token_dataset(8, 1))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def losses(trainer):
    return torch.tensor([h["loss"] for h in trainer.state.log_history if "loss" in h])


def weights(trainer):
    return {n: p.detach().float().cpu() for n, p in trainer.model.named_parameters()}


def assert_same_training(dev, cpu, **tol):
    assert dev.args.device == torch.device("neuron", 0) and cpu.args.device.type == "cpu"
    assert next(dev.model.parameters()).device.type == "neuron"
    torch.testing.assert_close(losses(dev), losses(cpu), **tol)
    got, want = weights(dev), weights(cpu)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-4, rtol=1e-3, msg=name)


def test_default_arguments_put_training_on_neuron_and_use_cpu_keeps_it_on_cpu(tmp_path):
    assert TrainingArguments(output_dir=str(tmp_path)).device == torch.device("neuron", 0)
    assert TrainingArguments(output_dir=str(tmp_path), use_cpu=True).device.type == "cpu"


def test_train_evaluate_predict_match_cpu(tmp_path):
    cpu, dev = train("cpu", tmp_path), train("neuron", tmp_path)
    assert_same_training(dev, cpu)
    assert losses(dev)[-1] < losses(dev)[0]
    want, got = cpu.evaluate(), dev.evaluate()
    assert set(got) >= {"eval_loss", "eval_runtime"}
    torch.testing.assert_close(torch.tensor(got["eval_loss"]), torch.tensor(want["eval_loss"]))
    want, got = cpu.predict(token_dataset(8, 2)), dev.predict(token_dataset(8, 2))
    assert isinstance(got.predictions, np.ndarray) and got.predictions.shape == (8, 16, VOCAB)
    torch.testing.assert_close(torch.from_numpy(got.predictions), torch.from_numpy(want.predictions),
                               atol=1e-4, rtol=1e-4)
    np.testing.assert_array_equal(got.label_ids, want.label_ids)
    torch.testing.assert_close(torch.tensor(got.metrics["test_loss"]), torch.tensor(want.metrics["test_loss"]))


def test_gradient_accumulation_matches_cpu_and_the_large_batch(tmp_path):
    cpu = train("cpu", tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=2)
    dev = train("neuron", tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=2)
    assert_same_training(dev, cpu)
    # Two micro-batches of 2 accumulate to the step of one batch of 4 (same rows, same order).
    whole = train("neuron", tmp_path / "whole")
    torch.testing.assert_close(losses(dev), losses(whole), atol=1e-5, rtol=1e-5)


def test_gradient_checkpointing_matches_cpu_and_the_plain_run(tmp_path):
    cpu = train("cpu", tmp_path, gradient_checkpointing=True)
    dev = train("neuron", tmp_path, gradient_checkpointing=True)
    assert dev.model.is_gradient_checkpointing
    assert_same_training(dev, cpu)
    plain = train("neuron", tmp_path / "plain")
    torch.testing.assert_close(losses(dev), losses(plain))


def test_bf16_mixed_precision_matches_cpu(tmp_path):
    cpu, dev = train("cpu", tmp_path, bf16=True), train("neuron", tmp_path, bf16=True)
    assert dev.accelerator.mixed_precision == "bf16" and dev.accelerator.native_amp
    # bf16 matmuls round in a different order on the two devices.
    torch.testing.assert_close(losses(dev), losses(cpu), atol=2e-3, rtol=2e-3)
    fp32 = train("neuron", tmp_path / "fp32")
    assert not torch.allclose(losses(dev), losses(fp32), atol=1e-5, rtol=0)  # autocast did run


def test_fp16_is_refused_by_accelerate_with_a_clear_error(tmp_path):
    """Accelerate 1.15 allows fp16 (GradScaler) only on a fixed device list, which
    has no neuron (AWS's Neuron trains in bf16); the Trainer cannot start. bf16 is
    the mixed precision for this device; if an Accelerate upgrade allows fp16,
    this test fails and fp16 gets tested against CPU instead."""
    with pytest.raises(ValueError, match=r"fp16 mixed precision requires a device in .*not 'neuron'"):
        train("neuron", tmp_path, fp16=True)
    x = torch.ones(2, device="neuron")
    assert (x * 2).sum().item() == 4.0  # the device keeps working


def checkpointed(tmp_path, steps=4):
    return dict(model=tiny_gpt2, steps=steps, save_strategy="steps", save_steps=2)


def test_checkpoint_holds_the_neuron_generator_and_resume_gives_the_same_losses(tmp_path):
    full = train("neuron", tmp_path, **checkpointed(tmp_path))
    checkpoint = tmp_path / "out-neuron" / "checkpoint-2"
    states = torch.load(checkpoint / "rng_state.pth", weights_only=False)
    assert states.keys() >= {"python", "numpy", "cpu", "neuron"}
    assert states["neuron"].dtype == torch.uint8 and states["neuron"].device.type == "cpu"
    assert not torch.equal(states["neuron"], torch.neuron.get_rng_state())  # the state of step 2, not 4

    torch.manual_seed(123)  # the resumed run must not depend on the process's generators
    resumed = train("neuron", tmp_path / "resumed", resume=str(checkpoint), **checkpointed(tmp_path))
    assert resumed.state.global_step == 4
    # GPT-2 drops out on the device: without the neuron generator's state the
    # masks of steps 3 and 4 differ and so do the losses.
    torch.testing.assert_close(losses(resumed), losses(full), atol=0, rtol=0)
    got, want = weights(resumed), weights(full)
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=0, rtol=0, msg=name)


def test_transformers_alone_still_leaves_the_neuron_generator_out(tmp_path):
    """Adaptation 10 is still needed: Transformers' own `_save_rng_state` writes no
    neuron entry. If an upgrade makes it save one, this fails: drop the adaptation."""
    trainer = Trainer(model=tiny_llama(), args=TrainingArguments(output_dir=str(tmp_path), report_to="none"))
    original = Trainer._save_rng_state.__wrapped__
    original(trainer, str(tmp_path / "plain"))
    plain = torch.load(tmp_path / "plain" / "rng_state.pth", weights_only=False)
    assert not any("neuron" in key for key in plain)
    trainer._save_rng_state(str(tmp_path / "adapted"))
    adapted = torch.load(tmp_path / "adapted" / "rng_state.pth", weights_only=False)
    assert torch.equal(adapted["neuron"], torch.neuron.get_rng_state())


def test_resume_from_a_checkpoint_without_the_neuron_state_still_runs(tmp_path):
    """A checkpoint written before this adaptation (no "neuron" entry) resumes."""
    train("neuron", tmp_path, **checkpointed(tmp_path, steps=2))
    checkpoint = tmp_path / "out-neuron" / "checkpoint-2"
    states = torch.load(checkpoint / "rng_state.pth", weights_only=False)
    del states["neuron"]
    torch.save(states, checkpoint / "rng_state.pth")
    resumed = train("neuron", tmp_path / "resumed", resume=str(checkpoint), **checkpointed(tmp_path))
    assert resumed.state.global_step == 4 and len(losses(resumed)) == 4
    assert os.path.isdir(tmp_path / "resumed" / "out-neuron" / "checkpoint-4")
