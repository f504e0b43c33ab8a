"""TRL on neuron, as TRL's own examples call it: `SFTTrainer` with the default
`SFTConfig` (bf16 mixed precision) on plain-text and conversational datasets,
with packing and with a PEFT `LoraConfig`, and `DPOTrainer` with the default
`DPOConfig`, each against the same script on CPU (`use_cpu=True`).

Nothing in the scripts names the device: `SFTConfig().device` is neuron:0 as it
is cuda:0 on a GPU (hf_integration, the Transformers adaptations). A tiny Llama
with random weights and a character-level tokenizer with a chat template
stand in for a downloaded model; the datasets are made with
`datasets.Dataset.from_dict`.

DPO rather than GRPO as the second trainer: it is the step users take after SFT
(preference pairs, a frozen reference model next to the trained one), and its
loss is deterministic, so it can be compared with CPU step by step. GRPO samples
its completions with the device's generator, whose stream is independent of
the CPU's by design, so a CPU comparison could only be statistical.
"""
import json
import os
import string
import subprocess
import sys

import pytest
import torch

import torchneuron  # noqa: F401

pytest.importorskip("trl", reason="trl (requirements.txt) is not installed")
import datasets  # noqa: E402
import peft  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer  # noqa: E402

pytestmark = [
    # Deprecations inside the libraries, not in these scripts.
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated"),
]

SPECIAL = ["<pad>", "<eos>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# bf16 autocast on both devices: the matmuls round to bfloat16 in a different
# order on neuron and on CPU, so losses agree to about 1e-4, not to float32's 1e-6.
# The backward's float32 accumulation of bfloat16 tiles: one mixed-precision GEMM
# where the target has one (at avx512_bf16: MKL's on Intel CPUs, oneDNN's
# microkernel on others), else the casts and the float32 product (docs/compile.md,
# "Pattern fusion"); into accumulators that start at zero (one chunk of tokens, as
# here), the product alone (docs/compile.md, "Accumulators that start at zero").
ACCUMULATING_GEMM = ("aten::mm.dtype" if torchneuron._C._compile_mixed_precision_gemm()
                     else "aten::mm.default")
BF16_TOL = dict(atol=2e-3, rtol=2e-3)


def tiny_tokenizer():
    """One token per character, the chat roles and <eos> as special tokens."""
    chars = string.ascii_lowercase + string.digits + " +=?"
    vocab = {tok: i for i, tok in enumerate(SPECIAL + list(chars))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                  additional_special_tokens=SPECIAL[2:])
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_model(tok):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    return LlamaForCausalLM(config)


def saved_model(tmp_path):
    """A model directory, as users pass a hub name or a path to the trainers."""
    path = tmp_path / "tiny-llama"
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


PAIRS = [(a, b) for a in range(6) for b in range(4)]


def text_dataset():
    return datasets.Dataset.from_dict({"text": [f"{a} plus {b} is {a + b}" for a, b in PAIRS]})


def chat_dataset():
    return datasets.Dataset.from_dict({"messages": [
        [{"role": "user", "content": f"{a}+{b}=?"}, {"role": "assistant", "content": str(a + b)}]
        for a, b in PAIRS]})


def preference_dataset():
    return datasets.Dataset.from_dict({
        "prompt": [f"{a}+{b}=?" for a, b in PAIRS[:12]],
        "chosen": [str(a + b) for a, b in PAIRS[:12]],
        "rejected": [str(a + b + 1) for a, b in PAIRS[:12]],
    })


def losses(trainer):
    return torch.tensor([h["loss"] for h in trainer.state.log_history if "loss" in h])


def sft_run(device, tmp_path, dataset, **config):
    tok = tiny_tokenizer()
    args = SFTConfig(output_dir=str(tmp_path / f"sft-{device}"), max_steps=3, per_device_train_batch_size=4,
                     logging_steps=1, report_to="none", save_strategy="no",
                     use_cpu=device == "cpu", **{"learning_rate": 1e-2, **config.pop("args", {})})
    trainer = SFTTrainer(model=tiny_model(tok), args=args, train_dataset=dataset, processing_class=tok, **config)
    before = trainable(trainer.model)
    trainer.train()
    after = trainable(trainer.model)
    return trainer, losses(trainer), {n: after[n] - before[n] for n in after}


def trainable(model):
    return {n: p.detach().float().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def assert_same_updates(dev_updates, cpu_updates, min_cosine=0.98):
    """AdamW normalizes each gradient by its own running magnitude: an element
    whose gradient keeps its sign moves by about the whole learning rate each
    step, one whose gradient is at rounding level moves erratically and its
    direction is decided by rounding (bf16's much more than float32's, and
    differently on CPUs whose GEMMs round differently: AVX-512 with BF16 or
    not). So each tensor's updates are compared as directions (cosine) over
    the elements CPU moved by at least a quarter of the tensor's largest
    update; those must be most of the elements it moved at all (embedding rows
    of tokens no batch had stay put), so nothing broken can hide in the
    rest."""
    assert dev_updates.keys() == cpu_updates.keys()
    for name, cpu in cpu_updates.items():
        dev = dev_updates[name].flatten()
        cpu = cpu.flatten()
        assert cpu.abs().max() > 0, name
        settled = cpu.abs() >= 0.25 * cpu.abs().max()
        moved = int((cpu != 0).sum())
        assert settled.sum() >= 0.5 * moved, (
            f"{name}: CPU moved only {int(settled.sum())} of the {moved} elements it moved decidedly")
        cosine = torch.nn.functional.cosine_similarity(dev[settled], cpu[settled], dim=0)
        assert cosine > min_cosine, (
            f"{name}: updates on neuron and CPU have cosine {cosine:.4f} over the "
            f"{int(settled.sum())} of {cpu.numel()} elements CPU moved decidedly")


def assert_sft_matches_cpu(tmp_path, dataset, **config):
    cpu, cpu_losses, cpu_updates = sft_run("cpu", tmp_path, dataset, **dict(config))
    dev, dev_losses, dev_updates = sft_run("neuron", tmp_path, dataset, **dict(config))
    assert cpu.args.device.type == "cpu"
    assert dev.args.device == torch.device("neuron", 0)
    assert next(dev.model.parameters()).device.type == "neuron"
    assert dev.args.bf16 and dev.accelerator.mixed_precision == "bf16"  # SFTConfig's default
    assert len(dev_losses) == 3
    torch.testing.assert_close(dev_losses, cpu_losses, **BF16_TOL)
    assert_same_updates(dev_updates, cpu_updates)
    return dev, dev_losses


def test_sft_default_config_plain_text_matches_cpu(tmp_path):
    dev, dev_losses = assert_sft_matches_cpu(tmp_path, text_dataset())
    assert dev_losses[-1] < dev_losses[0]


def test_sft_float32_matches_cpu_and_bf16_default_differs(tmp_path):
    """With bf16=False, losses and weights equal CPU's to float32 tolerance; the
    default's losses differ from those: autocast ran on the device."""
    _, cpu_fp32, cpu_updates = sft_run("cpu", tmp_path, text_dataset(), args=dict(bf16=False))
    dev, fp32, dev_updates = sft_run("neuron", tmp_path, text_dataset(), args=dict(bf16=False))
    assert dev.accelerator.mixed_precision == "no"
    torch.testing.assert_close(fp32, cpu_fp32)
    assert_same_updates(dev_updates, cpu_updates, min_cosine=0.999)
    _, bf16, _ = sft_run("neuron", tmp_path, text_dataset())
    assert not torch.allclose(bf16, fp32, atol=1e-5, rtol=0)
    torch.testing.assert_close(bf16, fp32, atol=5e-2, rtol=5e-2)


def test_sft_conversational_dataset_with_chat_template_matches_cpu(tmp_path):
    dev, _ = assert_sft_matches_cpu(tmp_path, chat_dataset())
    first = dev.train_dataset[0]["input_ids"]
    assert dev.processing_class.decode(first) == "<|user|>0+0=?<eos><|assistant|>0<eos>"


def test_sft_packing_matches_cpu(tmp_path):
    dev, _ = assert_sft_matches_cpu(tmp_path, text_dataset(), args=dict(packing=True, max_length=32))
    assert all(len(row["input_ids"]) <= 32 for row in dev.train_dataset)
    assert len(dev.train_dataset) < len(PAIRS)  # several examples per packed row


def test_sft_peft_lora_matches_cpu(tmp_path):
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    dev, _ = assert_sft_matches_cpu(tmp_path, chat_dataset(), peft_config=lora)
    assert isinstance(dev.model, peft.PeftModel)
    trained = {n for n, p in dev.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)


def test_dpo_default_config_matches_cpu(tmp_path):
    path = saved_model(tmp_path)

    def run(device):
        args = DPOConfig(output_dir=str(tmp_path / f"dpo-{device}"), max_steps=3, per_device_train_batch_size=4,
                         learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no",
                         use_cpu=device == "cpu")
        trainer = DPOTrainer(model=path, args=args, train_dataset=preference_dataset(),
                             processing_class=tiny_tokenizer())
        trainer.train()
        margins = torch.tensor([h["rewards/margins"] for h in trainer.state.log_history if "loss" in h])
        return trainer, losses(trainer), margins

    cpu, cpu_losses, cpu_margins = run("cpu")
    dev, dev_losses, dev_margins = run("neuron")
    assert next(dev.model.parameters()).device.type == "neuron"
    assert next(dev.ref_model.parameters()).device.type == "neuron"  # the frozen reference too
    torch.testing.assert_close(dev_losses[0], torch.tensor(0.6931), atol=1e-4, rtol=0)  # log 2: policy == ref
    torch.testing.assert_close(dev_losses, cpu_losses, **BF16_TOL)
    torch.testing.assert_close(dev_margins, cpu_margins, **BF16_TOL)


def test_trl_sft_command_line_trains_on_neuron_offline(tmp_path):
    """`trl sft` on a local model and a local JSON-lines dataset, as the TRL docs
    show it; its losses are the in-process SFTTrainer's on neuron. It goes through
    `accelerate launch`, which starts one process per neuron core; `--num_processes
    1` keeps it to one, so its losses compare with one in-process run (two
    processes: tests/test_hf_accelerate_launch.py and the main job)."""
    path = saved_model(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "train.jsonl", "w") as f:
        for row in chat_dataset():
            f.write(json.dumps(row) + "\n")
    out = tmp_path / "cli-out"
    trl = os.path.join(os.path.dirname(sys.executable), "trl")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [trl, "sft", "--num_processes", "1", "--model_name_or_path", path, "--dataset_name", str(data),
         "--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "4",
         "--learning_rate", "1e-2", "--logging_steps", "1", "--report_to", "none"],
        capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "checkpoint-2" / "trainer_state.json") as f:
        cli_losses = torch.tensor([h["loss"] for h in json.load(f)["log_history"] if "loss" in h])
    assert (out / "model.safetensors").exists() and (out / "chat_template.jinja").exists()

    args = SFTConfig(output_dir=str(tmp_path / "in-process"), max_steps=2, per_device_train_batch_size=4,
                     learning_rate=1e-2, logging_steps=1, report_to="none", save_strategy="no")
    trainer = SFTTrainer(model=path, args=args, train_dataset=datasets.load_dataset(str(data), split="train"))
    trainer.train()
    assert args.device.type == "neuron"
    torch.testing.assert_close(cli_losses, losses(trainer), atol=1e-6, rtol=1e-6)


def test_pad_to_multiple_of_auto_pads_nothing_on_neuron(tmp_path):
    """hf_integration adaptation 13: TRL's default `pad_to_multiple_of="auto"` pads
    to 128 tokens on neuron (for AWS's compiler); torchneuron runs eagerly, so it
    resolves to None as on other devices, and the collator pads each batch to
    its longest row. TRL's own answer is still 128 (kept with torch_compile=True):
    if an upgrade stops padding on neuron, this test fails and the adaptation can go."""
    out = str(tmp_path)
    assert SFTConfig(output_dir=out).pad_to_multiple_of is None
    assert DPOConfig(output_dir=out).pad_to_multiple_of is None
    assert SFTConfig(output_dir=out, torch_compile=True).pad_to_multiple_of == 128  # TRL's own "auto"
    assert SFTConfig(output_dir=out, pad_to_multiple_of=64).pad_to_multiple_of == 64
    assert SFTConfig(output_dir=out, use_cpu=True).pad_to_multiple_of is None
    args = SFTConfig(output_dir=out, report_to="none")
    trainer = SFTTrainer(model=tiny_model(tiny_tokenizer()), args=args, train_dataset=chat_dataset(),
                         processing_class=tiny_tokenizer())
    batch = next(iter(trainer.get_train_dataloader()))
    longest = max(len(trainer.train_dataset[i]["input_ids"]) for i in range(len(trainer.train_dataset)))
    assert batch["input_ids"].shape[1] <= longest < 128


def test_sft_torch_compile_with_default_gradient_checkpointing_matches_eager(tmp_path):
    """`torch_compile=True` with SFTConfig's defaults (gradient checkpointing, bf16):
    the recomputed attention goes through PyTorch's RNG-state ops
    (`run_and_save_rng_state`, which refused any device but cuda/cpu/hpu/xpu;
    torchneuron/compile/rng_prims.py). Losses equal the eager run's. Every AOT graph
    runs as a program: the RNG state is a value of the programs, the attention
    mask's gather (integer indices) an extern call, the attention backward with a
    mask that needs no gradient the device's kernel."""
    _, eager, _ = sft_run("neuron", tmp_path, text_dataset())
    dev, compiled, _ = sft_run("neuron", tmp_path, text_dataset(), args=dict(torch_compile=True))
    assert dev.args.gradient_checkpointing and dev.args.torch_compile_backend == "neuron"
    programs = [p for r in torchneuron.compile_metrics() for p in r["programs"].values()]
    assert any(p.get("executor") == "compiler" for p in programs), programs
    assert all(p.get("executor") == "compiler" for p in programs), [p["reason"] for p in programs]
    # TRL's fused LM head compiled with the model (adaptation 16): its backward
    # accumulates bfloat16 tiles in float32.
    assert any(ACCUMULATING_GEMM in p.get("extern_ops", {}) for p in programs), programs
    torch.testing.assert_close(compiled, eager, **BF16_TOL)


def _fused_lm_head_loss(head, device_type, hidden, weight, targets):
    with torch.autocast(device_type, dtype=torch.bfloat16):
        log_probs, entropy, _, _, top1 = head.apply(hidden, weight, None, targets, 1.0, 32768, None, 1.0,
                                                    ("log_probs", "entropy", "is_top1"))
    return -log_probs.mean(), entropy.detach().mean(), top1.sum()


def test_fused_lm_head_accumulates_in_one_mixed_precision_product_on_neuron():
    """hf_integration adaptation 17: TRL's fused LM head accumulates its bfloat16
    gradient tiles in float32 as one out_dtype product on CUDA only, and casts both
    operands to float32 elsewhere. Adapted, neuron takes the CUDA form, with the
    same result; CPU tensors keep TRL's. Fails if a TRL upgrade takes the out_dtype
    form on neuron itself (the adaptation is then unnecessary)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    import trl.kernels.chunked_logprob as chunked

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.names = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(str(func))
            return func(*args, **(kwargs or {}))

    adapted = chunked._addmm_fp32
    original = adapted.__wrapped__
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 300, generator=g).bfloat16(), torch.randn(300, 40, generator=g).bfloat16()
    acc = torch.randn(64, 40, generator=g)
    expected = acc.clone().addmm_(a.float(), b.float())
    results = {}
    for name, fn, device in (("original", original, "neuron"), ("adapted", adapted, "neuron"),
                             ("cpu", adapted, "cpu")):
        out, a_on, b_on = acc.to(device), a.to(device), b.to(device)
        with Ops() as ops:
            fn(out, a_on, b_on)
        results[name] = ops.names
        torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-5)
    assert "aten.addmm.dtype_out" not in results["original"], results["original"]
    assert results["adapted"] == ["aten.addmm.dtype_out"], results["adapted"]
    assert "aten.addmm.dtype_out" not in results["cpu"], results["cpu"]


def test_fused_lm_head_compiles_into_one_graph_on_neuron():
    """hf_integration adaptation 16: TRL's `ChunkedLogProbFunction` (every trainer's
    LM head and loss) breaks Dynamo's graph with its non-contiguous `out=` tile, so
    the whole function ran eagerly under torch.compile. Adapted, it is one graph with
    its backward, equal to the eager function on neuron and to CPU. Fails if a TRL
    upgrade makes the function traceable (the adaptation is then unnecessary)."""
    import functools

    import trl.trainer.utils as trl_utils

    adapted = trl_utils._ChunkedLogProbFunction
    original = adapted.function
    g = torch.Generator().manual_seed(0)
    hidden, weight = torch.randn(64, 32, generator=g), torch.randn(500, 32, generator=g)
    targets = torch.randint(0, 500, (64,), generator=g)

    def on(device):
        return [t.to(device).requires_grad_(t.is_floating_point()) for t in (hidden, weight, targets)]

    torch._dynamo.reset()
    breaks = torch._dynamo.explain(functools.partial(_fused_lm_head_loss, original, "neuron"))(*on("neuron"))
    assert breaks.graph_break_count > 0 and "out=" in str(breaks.break_reasons), breaks.break_reasons
    whole = torch._dynamo.explain(functools.partial(_fused_lm_head_loss, adapted, "neuron"))(*on("neuron"))
    assert whole.graph_break_count == 0 and whole.graph_count == 1, whole.break_reasons

    torch._dynamo.reset()
    compiled = torch.compile(functools.partial(_fused_lm_head_loss, adapted, "neuron"), backend="neuron")
    results = {}
    for name, device, fn in (("compiled", "neuron", compiled),
                             ("eager", "neuron", functools.partial(_fused_lm_head_loss, original, "neuron")),
                             ("cpu", "cpu", functools.partial(_fused_lm_head_loss, original, "cpu"))):
        h, w, t = on(device)
        loss, entropy, top1 = fn(h, w, t)
        loss.backward()
        results[name] = [x.detach().cpu() for x in (loss, entropy, top1, h.grad, w.grad)]
    for reference in ("eager", "cpu"):
        for got, want in zip(results["compiled"], results[reference]):
            torch.testing.assert_close(got, want, **BF16_TOL)
    programs = torchneuron.compile_metrics()[-1]["programs"]
    assert set(programs) == {"forward", "backward"}
    assert all(p["executor"] == "compiler" for p in programs.values()), programs
    assert ACCUMULATING_GEMM in programs["backward"]["extern_ops"], programs["backward"]["extern_ops"]
