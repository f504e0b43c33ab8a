"""Eager-mode benchmark: `neuron` against PyTorch CPU eager, in one run.

    python benchmarks/eager.py [--quick]

Prints, for each case, the CPU figure, the neuron figure and their ratio, next to
the target:
  - host latency per op on small tensors (add, mul, view, index_select): <= 2x CPU
    (the time the host spends issuing an op; the sustained time, with the queue
    drained, is printed below it)
  - throughput of large matmul, elementwise, softmax, selection (where and
    masked_fill_ over a 510 x 32000 logits-sized tensor, a 32000 mask), argmax
    of 8 rows of 152064 logits, an embedding's weight gradient (32k x 768,
    512 tokens) and a copy from host memory into a device tensor (CPU: into
    another host tensor):                                                >= 0.95x CPU
  - one training step of an MLP, a transformer block and a 2-layer LSTM:   <= 1.10x CPU
  - an AdamW step over 75M parameters (a 100M language model's linear layers), as
    each device runs it by default (neuron: PyTorch's foreach ops; CPU: a loop over
    the parameters) and with fused=True (no target: for comparison)
  - asynchrony: time for the host to enqueue a chain of large ops vs the time
    to run them (enqueue must return long before the work finishes).
Timings on a shared machine are noisy: each figure is the median of several
repeats, and only ratios within one run are meaningful. Each device is measured in
its own fresh process (see fresh_process.py for why).
"""
import argparse
import json
import statistics
import time

import torch
from torch import nn

from fresh_process import isa_line, measure_in_fresh_process


def sync(device):
    if device.type == "neuron":
        torch.neuron.synchronize(device)


def median_time(fn, device, repeats, inner):
    """Median seconds per call of fn (inner calls per repeat, synced at the end)."""
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        sync(device)
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def issue_time(fn, device, repeats, inner):
    """Median seconds the host spends issuing one call (the queue drains
    outside the timed region), and the median sustained seconds per call."""
    fn()
    sync(device)
    issue, sustained = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        issued = time.perf_counter()
        sync(device)
        done = time.perf_counter()
        issue.append((issued - t) / inner)
        sustained.append((done - t) / inner)
    return statistics.median(issue), statistics.median(sustained)


def host_latency(device, op, repeats, inner):
    a = torch.randn(16, 16, device=device)
    b = torch.randn(16, 16, device=device)
    idx = torch.tensor([0, 3, 5, 7], device=device)
    fns = {
        "add": lambda: a + b,
        "mul": lambda: a * b,
        "view": lambda: a.view(256),
        "index_select": lambda: a.index_select(0, idx),
    }
    return issue_time(fns[op], device, repeats, inner)


THROUGHPUT_CASES = ["matmul 1024", "elementwise 16M", "softmax 4096x4096", "where 510x32000",
                    "masked_fill_ 510x32000", "argmax 8x152k", "embedding grad 32k", "copy_ from host 64M"]


def throughput(device, case, repeats):
    g = torch.Generator().manual_seed(0)
    if case == "matmul 1024":
        a = torch.randn(1024, 1024, generator=g).to(device)
        b = torch.randn(1024, 1024, generator=g).to(device)
        fn, work, unit = (lambda: a @ b), 2 * 1024**3, "GFLOP/s"
    elif case == "elementwise 16M":
        a = torch.randn(16 * 2**20, generator=g).to(device)
        b = torch.randn(16 * 2**20, generator=g).to(device)
        fn, work, unit = (lambda: a * b + a), 5 * 4 * a.numel(), "GB/s"
    elif case == "embedding grad 32k":
        # The weight gradient of a 32k x 768 embedding for 512 tokens (a language
        # model's training step): bytes of the gradient written.
        grad = torch.randn(512, 768, generator=g).to(device)
        idx = torch.randint(0, 32000, (512,), generator=g).to(device)
        fn = lambda: torch.ops.aten.embedding_dense_backward(grad, idx, 32000, -1, False)  # noqa: E731
        work, unit = 32000 * 768 * 4, "GB/s"
    elif case == "where 510x32000":
        # torch.where(mask, -inf, scores), as logits processors write it: bytes read and written
        a = torch.randn(510, 32000, generator=g).to(device)
        mask = (torch.rand(32000, generator=g) > 0.5).to(device)
        fn, work, unit = (lambda: torch.where(mask, -float("inf"), a)), 2 * 4 * a.numel(), "GB/s"
    elif case == "argmax 8x152k":
        # greedy decoding's next tokens: a batch of 8 rows of float32 logits over
        # Qwen2's 152064-token vocabulary; bytes read
        a = torch.randn(8, 152064, generator=g).to(device)
        fn, work, unit = (lambda: a.argmax(-1)), 4 * a.numel(), "GB/s"
    elif case == "copy_ from host 64M":
        # host memory into a device tensor (CPU: into another host tensor), as a
        # model's weights or a batch arrive: bytes read and written
        src = torch.randn(16 * 2**20, generator=g)
        dst = torch.empty_like(src, device=device)
        fn, work, unit = (lambda: dst.copy_(src)), 2 * 4 * src.numel(), "GB/s"
    elif case == "masked_fill_ 510x32000":
        a = torch.randn(510, 32000, generator=g).to(device)
        mask = (torch.rand(32000, generator=g) > 0.5).to(device)
        fn, work, unit = (lambda: a.masked_fill_(mask, 0.0)), 2 * 4 * a.numel(), "GB/s"
    else:  # softmax
        a = torch.randn(4096, 4096, generator=g).to(device)
        fn, work, unit = (lambda: torch.softmax(a, dim=-1)), 2 * 4 * a.numel(), "GB/s"
    t = median_time(fn, device, repeats, 3)
    return work / t / 1e9, unit


def training_step(device, case, repeats):
    torch.manual_seed(0)
    if case == "MLP":
        model = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(),
                              nn.Linear(512, 10))
        x = torch.randn(128, 256)
        y = torch.randint(0, 10, (128,))
    elif case == "LSTM":
        # 2 layers, hidden 256, sequence 64, batch 32: the recurrence is 64
        # dependent steps per layer and direction of the pass.
        lstm = nn.LSTM(256, 256, num_layers=2)
        model = nn.Sequential(lstm)
        model.forward = lambda inp: lstm(inp)[0]
        x = torch.randn(64, 32, 256)
        y = torch.randn(64, 32, 256)
    else:
        model = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        x = torch.randn(16, 64, 256)
        y = torch.randn(16, 64, 256)
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        out = model(x)
        loss = nn.functional.cross_entropy(out, y) if case == "MLP" else \
            nn.functional.mse_loss(out, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return median_time(step, device, repeats, 3)


OPTIMIZER_CASES = ["AdamW default", "AdamW fused"]


def optimizer_step(device, case, repeats):
    # The linear layers of a 12-layer, 768-wide model with a 2048-wide MLP and
    # grouped key/value heads, and its norms: 75M float32 parameters.
    shapes = [(2048, 768)] * 36 + [(768, 768)] * 24 + [(256, 768)] * 24 + [(768,)] * 25
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g).to(device).requires_grad_() for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True if case == "AdamW fused" else None)
    opt.step()  # the state's first allocation
    return median_time(opt.step, device, repeats, 1)


def asynchrony(device, n_ops=20):
    a = torch.randn(2048, 2048, device=device)

    def chain(n):
        x = a
        for _ in range(n):
            x = x @ a
            x = x / x.norm()  # keeps values finite; norm stays on the device
        return x

    chain(2)  # first calls of each signature run synchronously (validation)
    sync(device)
    t = time.perf_counter()
    chain(n_ops)
    enqueue = time.perf_counter() - t
    sync(device)
    total = time.perf_counter() - t
    return enqueue, total


STEP_CASES = ["MLP", "transformer block", "LSTM"]


def row(name, cpu, neuron, ratio, target, ok, fmt):
    mark = "ok" if ok else "MISS"
    print(f"  {name:<22}{fmt(cpu):>14}{fmt(neuron):>14}{ratio:>9.2f}x   {target:<10}{mark}")


def measure(device_name, reps):
    """Every figure of one device, in this process."""
    device = torch.device(device_name)
    out = {"latency": {}, "throughput": {}, "step": {}}
    for op in ["add", "mul", "view", "index_select"]:
        out["latency"][op] = host_latency(device, op, reps, 2000)
    for case in THROUGHPUT_CASES:
        out["throughput"][case] = throughput(device, case, reps)
    for case in STEP_CASES:
        out["step"][case] = training_step(device, case, reps)
    out["optimizer"] = {case: optimizer_step(device, case, reps) for case in OPTIMIZER_CASES}
    if device.type == "neuron":
        out["asynchrony"] = asynchrony(device)
    return out


def main():
    parser = argparse.ArgumentParser(description="neuron vs CPU eager benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--child", nargs=2, metavar=("DEVICE", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]))))
        return
    reps = 3 if args.quick else 7
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
          f"neuron: {torch.neuron.get_device_name()}; each device measured in its own process",
          flush=True)
    print(isa_line(), flush=True)
    c_all, n_all = measure_in_fresh_process(__file__, "cpu", reps), measure_in_fresh_process(__file__, "neuron", reps)
    header = f"  {'case':<22}{'cpu':>14}{'neuron':>14}{'ratio':>10}   {'target':<10}"

    print("\nHost latency per op, 16x16 tensors (lower is better; ratio = neuron/cpu)")
    print(header)
    us = lambda s: f"{s * 1e6:.2f} us"  # noqa: E731
    for op in ["add", "mul", "view", "index_select"]:
        c, _ = c_all["latency"][op]
        n, n_sustained = n_all["latency"][op]
        row(op, c, n, n / c, "<= 2x", n / c <= 2.0, us)
        print(f"  {'':<22}{'':>14}{us(n_sustained):>14}   (sustained: issue + run, queue drained)")

    print("\nThroughput of large ops (higher is better; ratio = neuron/cpu)")
    print(header)
    for case in THROUGHPUT_CASES:
        c, unit = c_all["throughput"][case]
        n, _ = n_all["throughput"][case]
        row(case, c, n, n / c, ">= 0.95x", n / c >= 0.95, lambda v: f"{v:.1f} {unit}")

    print("\nOne training step, AdamW (lower is better; ratio = neuron/cpu)")
    print(header)
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    for case in STEP_CASES:
        c, n = c_all["step"][case], n_all["step"][case]
        row(case, c, n, n / c, "<= 1.10x", n / c <= 1.10, ms)

    print("\nOne AdamW step, 75M parameters (lower is better; ratio = neuron/cpu; default: neuron's\n"
          "  foreach ops against CPU's loop over the parameters, as PyTorch picks for each device)")
    print(header)
    for case in OPTIMIZER_CASES:
        c, n = c_all["optimizer"][case], n_all["optimizer"][case]
        row(case, c, n, n / c, "-", True, ms)

    print("\nAsynchrony: 20 chained 2048x2048 matmuls on neuron")
    enqueue, total = n_all["asynchrony"]
    print(f"  host enqueue {enqueue * 1e3:.1f} ms, execution {total * 1e3:.1f} ms "
          f"(enqueue = {enqueue / total:.1%} of execution)")


if __name__ == "__main__":
    main()
