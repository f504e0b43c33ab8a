"""TRL supervised fine-tuning throughput: training tokens per second of a ~100M
Qwen3-style model, neuron against CPU eager.

    python benchmarks/train.py [--quick] [--steps N] [--batch B] [--seq L] [--only CASE ...] [--rounds R]
                               [--profile K]

Cases (each in its own fresh process, see fresh_process.py; CPU runs as plain
PyTorch without the neuron backend):
  cpu-fp32, cpu-bf16              SFTTrainer on CPU (`use_cpu=True`), float32 and
                                  bf16 mixed precision (SFTConfig's default)
  neuron-fp32, neuron-bf16        the same on neuron (SFTConfig's device)
  neuron-compile-fp32, -bf16      the same with `torch_compile=True` (backend "neuron")

Every case is the same script: `SFTTrainer(model=Qwen3ForCausalLM(config),
args=SFTConfig(...), train_dataset=...)` with SFTConfig's defaults (gradient
checkpointing, AdamW) but the precision, a batch of B rows of L random tokens
(pre-tokenized, no padding, so every step trains on B x L tokens), and
`max_steps` = warm-up + N. Reported: the median step time of the last N
steps (the device synchronized at each step's end), tokens per second, the
first step's time (a compiled case compiles there), peak device memory, and
the ratios neuron / CPU eager (target >= 1.0x) and compiled / neuron eager
(target >= 1.3x).

Each neuron case runs a few steps more, under torch.profiler and out of the
timing; with both neuron cases of a precision, the report prints the device
time of the work that compiled programs run as eager does (the library's
matrix products, the device's attention kernels, the optimizer and gradient
clipping outside the compiled model) and the ceiling it sets for
`torch_compile=True` over eager: eager step / that work (the least of the
profiled steps of both; compile_ceiling.py).

`--profile K` also runs the first timed step of each case under torch.profiler
and prints its K ops (or, compiled, program steps) with the most device time
(neuron cases) or CPU time (CPU cases); docs/profiling.md.
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from compile_ceiling import PROFILED_STEPS, describe, device_ops, shared_work  # noqa: E402
from fresh_process import isa_line, measure_in_fresh_process  # noqa: E402

CASES = ("cpu-fp32", "cpu-bf16", "neuron-fp32", "neuron-bf16", "neuron-compile-fp32", "neuron-compile-bf16")
WARMUP = 2  # steps before timing: the first calls of each shape, compilation


def model_config(quick):
    from transformers import Qwen3Config

    if quick:  # a few million parameters, to check the script
        return Qwen3Config(vocab_size=4096, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    # ~100M: 12 layers of hidden 768 (GQA 12/4 heads of 64, SwiGLU 2048) and a
    # 32k vocabulary with tied embeddings, Qwen3's shape at small scale.
    return Qwen3Config(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, num_key_value_heads=4, head_dim=64, tie_word_embeddings=True,
                       max_position_embeddings=2048)


def tokenizer(vocab_size):
    """A word-level tokenizer over the model's vocabulary (the rows are already tokens)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="t0", eos_token="t1")


def profile_table(prof, device_type, rows):
    from torch.autograd import DeviceType

    if device_type == "cpu":
        return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=70)
    # The device's intervals only: eager ops, or a compiled program's steps.
    device = [e for e in prof.key_averages() if e.device_type == DeviceType.PrivateUse1 and not e.is_user_annotation]
    total = sum(e.self_device_time_total for e in device) or 1
    lines = [f"{'device ms':>10} {'share':>6} {'calls':>6}  op or program step"]
    for e in sorted(device, key=lambda e: -e.self_device_time_total)[:rows]:
        lines.append(f"{e.self_device_time_total / 1e3:10.2f} {e.self_device_time_total / total:6.1%} {e.count:6d}  {e.key}")
    lines.append(f"{total / 1e3:10.2f} total device time of the step")
    return "\n".join(lines)


def measure(case, steps, batch, seq, quick, profile_rows=0):
    import datasets
    import torch
    from transformers import Qwen3ForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    device_type = case.split("-")[0]
    compiled = "-compile-" in case
    bf16 = case.endswith("bf16")
    config = model_config(quick)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    # Neuron cases run a few steps more, under the profiler and out of the
    # timing: their work that compiled programs run as eager does
    # (compile_ceiling.py) bounds what torch_compile=True can gain.
    ceiling_steps = PROFILED_STEPS if device_type == "neuron" else 0
    rows = torch.randint(2, config.vocab_size, (batch * (WARMUP + steps + ceiling_steps), seq),
                         generator=torch.Generator().manual_seed(1))
    data = datasets.Dataset.from_dict({"input_ids": rows.tolist()})

    def sync():
        if device_type == "neuron":
            torch.neuron.synchronize()

    times = []
    profiled = {}
    ceiling_profiles = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            sync()
            if (profile_rows and len(times) == WARMUP) or (ceiling_steps and len(times) >= WARMUP + steps):
                from torch.profiler import ProfilerActivity, profile

                activities = [ProfilerActivity.CPU] + ([ProfilerActivity.PrivateUse1] if device_type == "neuron" else [])
                profiled["session"] = profile(activities=activities)
                profiled["session"].__enter__()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            sync()
            times.append(time.perf_counter() - self.start)
            if "session" in profiled:
                session = profiled.pop("session")
                session.__exit__(None, None, None)
                if len(times) == WARMUP + 1 and profile_rows:
                    profiled["table"] = profile_table(session, device_type, profile_rows)
                if ceiling_steps and len(times) > WARMUP + steps:
                    ceiling_profiles.append(device_ops(session))

    args = SFTConfig(output_dir=os.path.join(os.environ.get("TMPDIR", "/tmp"), f"train-bench-{case}"),
                     max_steps=WARMUP + steps + ceiling_steps, per_device_train_batch_size=batch, bf16=bf16,
                     torch_compile=compiled, use_cpu=device_type == "cpu", max_length=seq,
                     logging_steps=10_000, save_strategy="no", report_to="none", disable_tqdm=True,
                     dataloader_drop_last=True)
    assert args.device.type == device_type, (args.device, case)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=tokenizer(config.vocab_size),
                         callbacks=[StepTimes()])
    trainer.train()
    # The profiled step is slower: keep it out of the timing when others are left.
    timed = times[WARMUP:WARMUP + steps]
    if profile_rows and len(timed) > 1:
        timed = timed[1:]
    step = statistics.median(timed)
    peak = torch.neuron.max_memory_allocated() if device_type == "neuron" else 0
    graphs = {}
    if compiled:  # how the compiled graphs ran: as programs, or eagerly and why
        import torchneuron

        for record in torchneuron.compile_metrics():
            for program in record["programs"].values():
                how = program.get("executor", "?")
                if how != "compiler":
                    how += f" ({program.get('reason', program.get('fallback', '?'))})"
                graphs[how] = graphs.get(how, 0) + 1
    return {"params": sum(p.numel() for p in model.parameters()), "first": times[0], "step": step,
            "tokens_per_second": batch * seq / step, "peak": peak, "threads": torch.get_num_threads(),
            "graphs": graphs, "profile": profiled.get("table"),
            "shared_work": shared_work(ceiling_profiles) if ceiling_profiles else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3, help="timed steps after %d warm-up steps" % WARMUP)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    p.add_argument("--rounds", type=int, default=1, help="measure each case this many times, keep the fastest")
    p.add_argument("--quick", action="store_true", help="a small model, to check the script")
    p.add_argument("--profile", type=int, default=0, metavar="K",
                   help="profile the first timed step and print its K costliest ops or program steps")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.steps, args.batch, args.seq, args.quick, args.profile)))
        return
    import torch

    print(f"torch {torch.__version__}; each case in its own fresh process; batch {args.batch} x {args.seq} "
          f"tokens, {WARMUP} warm-up + {args.steps} timed steps", flush=True)
    print(isa_line(), flush=True)
    extra = (["--steps", args.steps, "--batch", args.batch, "--seq", args.seq, "--profile", args.profile]
             + (["--quick"] if args.quick else []))
    results = {}
    for _ in range(args.rounds):
        for case in args.only:
            r = measure_in_fresh_process(__file__, case, *extra)
            if case not in results or r["step"] < results[case]["step"]:
                results[case] = r
            print(f"  {case:<20} {r['tokens_per_second']:8.0f} tokens/s  step {r['step']:7.3f}s  "
                  f"first step {r['first']:7.2f}s  peak {r['peak'] / 2**20:7.0f} MiB  "
                  f"{r['params'] / 1e6:.0f}M parameters, {r['threads']} threads", flush=True)
            if r["graphs"]:
                print(f"    compiled graphs: " + ", ".join(f"{n} {how}" for how, n in r["graphs"].items()), flush=True)
            if r["profile"]:
                print("    " + r["profile"].replace("\n", "\n    "), flush=True)
    if args.rounds > 1:
        print(f"fastest of {args.rounds} rounds per case")

    def ratio(a, b, what):
        if a in results and b in results:
            x = results[a]["tokens_per_second"] / results[b]["tokens_per_second"]
            print(f"  {a} / {b}: {x:.2f}x  ({what})")

    print("ratios (tokens/s):")
    for precision in ("fp32", "bf16"):
        ratio(f"neuron-{precision}", f"cpu-{precision}", "neuron eager vs CPU eager, target >= 1.0x")
    for precision in ("fp32", "bf16"):
        ratio(f"neuron-compile-{precision}", f"neuron-{precision}", "torch_compile=True vs eager, target >= 1.3x")
        eager, compiled = results.get(f"neuron-{precision}"), results.get(f"neuron-compile-{precision}")
        if eager and compiled:
            works = {"eager": eager["shared_work"], "compiled": compiled["shared_work"]}
            print(f"    {describe(1e3 * eager['step'], works)}")


if __name__ == "__main__":
    sys.exit(main())
