"""Command line of the demo; see the package docstring."""
import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402  (autoloads the neuron device)
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from . import launch, task  # noqa: E402
from .dataset import write_dataset  # noqa: E402
from .evaluate import evaluate  # noqa: E402
from .model import build_model  # noqa: E402
from .report import REPORT  # noqa: E402
from .tokenizer import build_tokenizer  # noqa: E402

GLOBAL_BATCH = 64


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m torchneuron.demo",
        description="Fine-tune a small Qwen3 chat model with TRL's SFTTrainer on neuron cores "
                    "(FSDP2 through accelerate launch) to answer addition questions.")
    p.add_argument("--steps", type=int, default=None, help="training steps (default 600, 12 with --quick)")
    p.add_argument("--device", default="neuron", choices=("neuron", "cpu"),
                   help="neuron (default), or cpu: the same script in one CPU process, as a reference")
    p.add_argument("--cores", type=int, default=2,
                   help="neuron cores to train on, one process each (default 2; 1 trains without FSDP)")
    p.add_argument("--out", default="out/demo", help="output directory (default out/demo)")
    p.add_argument("--seed", type=int, default=0, help="seed of the problems, weights and batches")
    p.add_argument("--held-out", type=int, default=None,
                   help="held-out problems (default 500, 64 with --quick)")
    p.add_argument("--quick", action="store_true", help="a short run for tests: few steps, small held-out set")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 12 if args.quick else 600
    if args.held_out is None:
        args.held_out = 64 if args.quick else 500
    if args.steps < 1 or args.held_out < 1 or args.cores < 1:
        p.error("--steps, --held-out and --cores must be at least 1")
    if GLOBAL_BATCH % args.cores:
        p.error(f"--cores must divide the global batch of {GLOBAL_BATCH}")
    return args


def say(*lines):
    print(*lines, sep="\n", flush=True)  # before a child process writes to the same terminal


def score(result, n):
    return f"{result.accuracy:.1%} ({result.correct}/{n} exactly right)"


def cores_to_use(requested):
    """How many cores training gets, and why fewer if so."""
    visible = torch.neuron.device_count()
    if requested > visible:
        say(f"  only {visible} neuron core(s) visible here (NEURON_RT_NUM_CORES / NEURON_RT_VISIBLE_CORES): "
            f"training on {visible} instead of {requested}")
        return visible
    return requested


def training_config(args, out, processes):
    """TRL's training arguments (SFTConfig, ScriptArguments, ModelConfig), as a
    TRL recipe file holds them; everything else keeps SFTConfig's defaults
    (bf16 mixed precision, gradient checkpointing, no packing, AdamW)."""
    return {
        "model_name_or_path": str(out / "base"),
        "dataset_name": str(out / "data"),
        "output_dir": str(out),
        "max_steps": args.steps,
        "per_device_train_batch_size": GLOBAL_BATCH // processes,
        # A model trained from random weights needs a far larger rate than
        # SFTConfig's 2e-5 for fine-tuning a pretrained one.
        "learning_rate": 3e-3,
        "lr_scheduler_type": "cosine",
        # The loss on the assistant's replies only (the chat template marks them):
        # the questions' operands are random, there is nothing to learn in them.
        "assistant_only_loss": True,
        "warmup_steps": 0.05,
        "logging_steps": max(1, args.steps // 12),
        "save_strategy": "no",
        "report_to": "none",
        "seed": args.seed,
        "use_cpu": args.device == "cpu",
    }


def main(argv=None):
    args = parse_args(argv)
    begin = time.perf_counter()
    transformers.utils.logging.disable_progress_bar()  # this process's; the training shows TRL's own
    out = Path(args.out)
    on_neuron = args.device == "neuron"
    device = torch.device("neuron:0" if on_neuron else "cpu")
    if on_neuron:
        props = torch.neuron.get_device_properties(device)
        say(f"device: {props.name}, {torch.neuron.device_count()} core(s) of {props.total_memory / 2**30:.1f} GiB")
    else:
        say("device: cpu (reference run)")

    say("", "[1/5] data: chat conversations the project generates, answers it can check")
    train_set, held_out = task.splits(args.seed, n_train=20_000, n_test=args.held_out)
    data = write_dataset(out / "data", train_set, held_out)
    tokenizer = build_tokenizer()
    say(f"  {data}/train.jsonl: {len(train_set)} conversations, {data}/test.jsonl: {len(held_out)} held out "
        f"(disjoint, seed {args.seed}), in the `messages` format; one through the chat template:",
        "    " + repr(tokenizer.apply_chat_template(held_out[0].messages(), tokenize=False)))

    say("", "[2/5] model: a Qwen3 chat model from its config, fresh random weights")
    model = build_model(tokenizer, seed=args.seed)
    model.save_pretrained(out / "base")
    tokenizer.save_pretrained(out / "base")
    c = model.config
    say(f"  {type(model).__name__}: {c.num_hidden_layers} layers, hidden {c.hidden_size}, "
        f"{c.num_attention_heads} heads / {c.num_key_value_heads} kv heads, vocab {c.vocab_size}, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters; saved to {out / 'base'}")
    before = evaluate(model.to(device), tokenizer, held_out)
    say(f"  held-out accuracy before training (greedy, on {device}): {score(before, len(held_out))}")
    del model

    say("", "[3/5] fine-tuning with TRL's SFTTrainer (SFTConfig defaults: bf16 mixed precision, "
        "gradient checkpointing)")
    processes = cores_to_use(args.cores) if on_neuron else 1
    config = training_config(args, out, processes)
    recipe = launch.write_yaml(out / "sft.yaml", config)
    if not on_neuron:
        cmd = launch.one_process(recipe)
        how = "one CPU process"
    elif processes > 1:
        accel = launch.write_yaml(out / "accelerate_fsdp2.yaml", {**launch.FSDP2, "num_processes": processes})
        cmd = launch.accelerate_launch(accel, processes, recipe)
        how = f"{processes} neuron cores, one process each, FSDP2"
    else:
        say("  one core: training in one process, without FSDP")
        cmd = launch.one_process(recipe)
        how = "1 neuron core"
    say(f"  on {how}: {args.steps} steps of {GLOBAL_BATCH} conversations, "
        f"learning rate {config['learning_rate']}, cosine schedule", f"  $ {launch.show(cmd)}")
    launch.run(cmd)
    with open(out / REPORT) as f:
        report = json.load(f)
    losses = report["losses"]

    say("", f"[4/5] the checkpoint: a standard Transformers one, in {out}")
    for f in sorted(out.iterdir()):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".jinja"):
            say(f"  {f.name:<26} {f.stat().st_size / 1024:8.1f} KiB")

    say("", "[5/5] reloading with AutoModelForCausalLM.from_pretrained and generating greedily")
    tokenizer = AutoTokenizer.from_pretrained(out)
    results = {}
    for device_map in (("cpu", "neuron") if on_neuron else ("cpu",)):
        model = AutoModelForCausalLM.from_pretrained(out, device_map=device_map)
        results[device_map] = result = evaluate(model, tokenizer, held_out)
        say(f"  device_map={device_map!r} ({model.device}, {model.dtype}): held-out accuracy {score(result, len(held_out))}, "
            f"{result.tokens_per_second:.0f} generated tokens/s")
        del model
    after = results[args.device]
    if on_neuron:
        same = sum(a == b for a, b in zip(results["cpu"].completions, results["neuron"].completions))
        say(f"  completions identical on cpu and neuron: {same}/{len(held_out)}")
    say("  examples (held-out questions; the first five, then any wrong ones):")
    pairs = list(zip(held_out, after.completions))
    wrong = [(p, got) for p, got in pairs[5:] if not task.check(p.question, got)]
    for p, got in pairs[:5] + wrong[:3]:
        mark = "right" if task.check(p.question, got) else f"wrong, expected {p.answer}"
        say(f"    {p.question:<16} -> {got!r:<7} {mark}")

    say("", f"held-out accuracy: {before.accuracy:.1%} before training, {after.accuracy:.1%} after "
        f"(reloaded checkpoint); loss {losses[0][1]:.3f} at step {losses[0][0]} -> {losses[-1][1]:.3f} "
        f"at step {losses[-1][0]}")
    where = f"{report['processes']} x {report['device'].split(':')[0]}"
    say(f"training: {report['train_tokens']:.0f} tokens in {report['train_runtime']:.1f}s, "
        f"{report['tokens_per_second']:.0f} tokens/s ({where}, {report['distributed_type']}, "
        f"{report['mixed_precision']})")
    if on_neuron:
        peaks = ", ".join(f"core {i}: {b / 2**20:.1f} MiB" for i, b in enumerate(report["peak_memory_bytes"]))
        say(f"peak device memory in training: {peaks}")
    say(f"wall time: {time.perf_counter() - begin:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
