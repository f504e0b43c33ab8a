"""Bus bandwidth of all_reduce, all_gather and reduce_scatter: the `neuron` backend on
neuron tensors against gloo on CPU tensors in the same run (one group,
backend="cpu:gloo,neuron:neuron"), beside the memcpy bandwidth of this host measured
in the same run, plus small-message all_reduce latency (dist.all_reduce(t) and then a
stream synchronization, and async_op=True with a host wait).

    python -m torch.distributed.run --nproc_per_node=2 benchmarks/collectives.py [--max-mib 64]
        [--min-kib 4] [--ops all_reduce all_gather reduce_scatter]

Bus bandwidth as nccl-tests define it: all_reduce 2(n-1)/n x bytes / time, all_gather
and reduce_scatter (n-1)/n x bytes of the whole buffer / time. The memcpy peer is timed
between the neuron collective's iterations, every rank copying at the same moment: the
share of the host's memory bandwidth each rank has while all of them move data, under
the same conditions as the collective (on a shared machine that bandwidth drifts by 2x
within seconds). Timings on a shared machine are noisy; compare within one run.
"""
import argparse
import os
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def agreed_max(value):
    # CPU tensor: gloo's half of the group.
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def timed(fn, budget_s, min_iters=3, max_iters=200, between=None):
    """The slowest rank's median time of `fn`; with `between`, also this rank's median
    time of `between`, run after each timed call of `fn`."""
    fn()  # warm-up (first-use costs, page faults)
    if between:
        between()
    t0 = time.perf_counter()
    fn()
    # Every rank must run the same number of collectives: agree on it.
    first = agreed_max(time.perf_counter() - t0)
    iters = int(min(max_iters, max(min_iters, budget_s / max(first, 1e-9))))
    times, between_times = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if between:
            t0 = time.perf_counter()
            between()
            between_times.append(time.perf_counter() - t0)
    # A collective ends on the last rank: take the slowest rank's median.
    slowest = agreed_max(statistics.median(times))
    return (slowest, statistics.median(between_times)) if between else slowest


def completed(fn, device):
    """`fn` then, on neuron, a wait for the stream: wait() may only order the stream
    after the collective, as with CUDA (a collective issued on an idle stream runs
    on the calling thread and has ended when the call returns)."""
    if device.type == "cpu":
        return fn
    stream = torch.neuron.current_stream(device)

    def run():
        fn()
        stream.synchronize()
    return run


def case(kind, nbytes, world, rank, device):
    n = max(1, nbytes // 4)
    if kind == "all_reduce":
        t = torch.ones(n, device=device)
        return completed(lambda: dist.all_reduce(t), device), 2 * (world - 1) / world * n * 4
    per = max(1, n // world)
    if kind == "all_gather":
        src, dst = torch.ones(per, device=device), torch.empty(per * world, device=device)
        return (completed(lambda: dist.all_gather_single(dst, src), device),
                (world - 1) / world * per * world * 4)
    src, dst = torch.ones(per * world, device=device), torch.empty(per, device=device)
    return (completed(lambda: dist.reduce_scatter_single(dst, src), device),
            (world - 1) / world * per * world * 4)


def host_copy(nbytes):
    src = torch.ones(max(1, nbytes // 4))
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mib", type=int, default=64)
    ap.add_argument("--min-kib", type=int, default=4, help="smallest message (a power of 4 KiB)")
    ap.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather", "reduce_scatter"],
                    choices=["all_reduce", "all_gather", "reduce_scatter"])
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per case and backend")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("cpu:gloo,neuron:neuron", timeout=timedelta(seconds=300))
    neuron = torch.device("neuron", local_rank)
    sizes = []
    s = 4 << 10
    while s < args.min_kib << 10:
        s *= 4
    while s <= args.max_mib << 20:
        sizes.append(s)
        s *= 4
    if rank == 0:
        print(f"{world} ranks; bus bandwidth GB/s (neuron / gloo = ratio); memcpy GB/s of the same size")
        print(f"{'op':<15}{'size':>10}{'neuron':>10}{'gloo':>10}{'ratio':>8}{'memcpy':>9}{'neuron/memcpy':>15}")
    for kind in args.ops:
        for nbytes in sizes:
            fn, bus_bytes = case(kind, nbytes, world, rank, neuron)
            t, t_copy = timed(fn, args.budget, between=host_copy(nbytes))
            fn, _ = case(kind, nbytes, world, rank, torch.device("cpu"))
            res = {"neuron": bus_bytes / t / 1e9, "gloo": bus_bytes / timed(fn, args.budget) / 1e9}
            mem = nbytes / t_copy / 1e9
            if rank == 0:
                size = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
                print(f"{kind:<15}{size:>10}{res['neuron']:>10.2f}{res['gloo']:>10.2f}"
                      f"{res['neuron'] / res['gloo']:>8.1f}{mem:>9.2f}{res['neuron'] / mem:>15.2f}", flush=True)
    lat = {}
    for name, dev in (("neuron", neuron), ("gloo", torch.device("cpu"))):
        t = torch.ones(1, device=dev)
        lat[name] = timed(completed(lambda: dist.all_reduce(t), dev), args.budget, min_iters=20)
    # wait(timeout) blocks the host instead of ordering the stream (as
    # TORCHNEURON_DIST_BLOCKING_WAIT=1 does for every wait), and may run the
    # collective on this thread.
    t = torch.ones(1, device=neuron)
    lat["host"] = timed(lambda: dist.all_reduce(t, async_op=True).wait(timedelta(seconds=300)),
                        args.budget, min_iters=20)
    if rank == 0:
        print(f"small all_reduce (4 bytes) latency: neuron {lat['neuron'] * 1e6:.0f} us "
              f"(dist.all_reduce(t), then a stream sync; {lat['neuron'] / lat['gloo']:.2f}x gloo), "
              f"{lat['host'] * 1e6:.0f} us with a host wait ({lat['host'] / lat['gloo']:.2f}x gloo), "
              f"gloo {lat['gloo'] * 1e6:.0f} us")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
