"""Command line of the demo; see the package docstring."""
import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402  (autoloads the neuron device)
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import torchneuron  # noqa: E402

from . import task  # noqa: E402
from .evaluate import evaluate  # noqa: E402
from .model import build_model  # noqa: E402
from .tokenizer import build_tokenizer  # noqa: E402
from .train import train  # noqa: E402

BATCH = 64


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m torchneuron.demo",
                                description="Fine-tune a small Qwen3 on neuron to add numbers.")
    p.add_argument("--steps", type=int, default=None,
                   help="training steps (default 800, 40 with --quick)")
    p.add_argument("--device", default="neuron", help="neuron, neuron:1, or cpu as a reference")
    p.add_argument("--out", default="out/demo", help="checkpoint directory (default out/demo)")
    p.add_argument("--seed", type=int, default=0, help="seed of the problems, weights and batches")
    p.add_argument("--held-out", type=int, default=None,
                   help="held-out problems (default 500, 64 with --quick)")
    p.add_argument("--quick", action="store_true", help="a short run for tests: few steps, small held-out set")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 40 if args.quick else 800
    if args.held_out is None:
        args.held_out = 64 if args.quick else 500
    return args


def score(result, n):
    return f"{result.accuracy:.1%} ({result.correct}/{n} exactly right)"


def main(argv=None):
    args = parse_args(argv)
    begin = time.perf_counter()
    transformers.utils.logging.disable_progress_bar()  # one line per event instead
    device = torch.device(args.device)
    on_neuron = device.type == "neuron"
    if on_neuron:
        props = torch.neuron.get_device_properties(device)
        print(f"device {device}: {props.name}, {props.total_memory / 2**30:.1f} GiB, "
              f"{torch.neuron.device_count()} core(s)")
        torch.neuron.reset_peak_memory_stats(device)
        torchneuron.reset_executed_ops()
    else:
        print(f"device {device} (reference run)")

    torch.manual_seed(args.seed)
    train_set, held_out = task.splits(args.seed, n_train=20_000, n_test=args.held_out)
    example = held_out[0]
    print(f"task: addition, operands below 100, e.g. {example.prompt!r} -> {example.answer!r}; "
          f"{len(train_set)} training and {len(held_out)} held-out problems (disjoint, seed {args.seed})")

    tokenizer = build_tokenizer()
    model = build_model(tokenizer).to(device)
    c = model.config
    print(f"model: {type(model).__name__} built from a Qwen3Config with fresh random weights: "
          f"{c.num_hidden_layers} layers, hidden {c.hidden_size}, {c.num_attention_heads} heads / "
          f"{c.num_key_value_heads} kv heads, vocab {c.vocab_size} (characters), "
          f"{sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, {model.dtype}")

    print("\n[1/4] held-out accuracy before training (greedy generation)")
    before = evaluate(model, tokenizer, held_out, device)
    print(f"  before training: {score(before, len(held_out))}")

    print(f"\n[2/4] fine-tuning on {device}: {args.steps} steps, AdamW, batch {BATCH}, "
          f"loss on the answer tokens only")
    losses = train(model, tokenizer, train_set, device, args.steps, batch_size=BATCH, seed=args.seed,
                   log_every=50 if args.steps >= 400 else 10)
    after = evaluate(model, tokenizer, held_out, device)
    print(f"  after training: {score(after, len(held_out))}")

    out = Path(args.out)
    print(f"\n[3/4] saving a Transformers checkpoint to {out}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    for f in sorted(out.iterdir()):
        if f.is_file():
            print(f"  {f.name:<24} {f.stat().st_size / 1024:8.1f} KiB")

    device_map = str(device)
    print(f"\n[4/4] reloading with AutoModelForCausalLM.from_pretrained(..., device_map={device_map!r})")
    del model
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out, device_map=device_map)
    reloaded = evaluate(model, tokenizer, held_out, device)
    same = "completions identical" if reloaded.completions == after.completions else "completions differ"
    print(f"  reloaded onto {model.device}: {score(reloaded, len(held_out))}; {same} to before saving")
    assert reloaded.accuracy == after.accuracy, (
        f"the reloaded model scores {reloaded.accuracy:.3%}, before saving {after.accuracy:.3%}")
    print("  examples (held-out problems; the first six, then any wrong ones):")
    pairs = list(zip(held_out, reloaded.completions))
    wrong = [(p, got) for p, got in pairs[6:] if not task.check(p.prompt, got)]
    for p, got in pairs[:6] + wrong[:3]:
        mark = "right" if task.check(p.prompt, got) else f"wrong, expected {p.answer}"
        print(f"    {p.prompt:>6}{got:<5} {mark}")

    print(f"\nheld-out accuracy: {before.accuracy:.1%} before training, {after.accuracy:.1%} after, "
          f"{reloaded.accuracy:.1%} reloaded; loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"generation: {reloaded.tokens_per_second:.0f} tokens/s ({reloaded.new_tokens} new tokens in "
          f"{reloaded.seconds:.2f}s; greedy, batches of 128 left-padded prompts, dynamic KV cache; "
          f"each row counted up to and including its <eos>)")
    if on_neuron:
        torch.neuron.synchronize(device)
        print(f"peak device memory: {torch.neuron.max_memory_allocated(device) / 2**20:.1f} MiB; "
              f"ops copied to the CPU: {', '.join(torchneuron.fallback_ops()) or 'none'}")
    print(f"wall time: {time.perf_counter() - begin:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
