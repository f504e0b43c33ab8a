"""Device memory shared with the other local ranks (TORCHNEURON_DIST_SHARED_MEMORY=1: a
neuroncoll SharedArena, which large collectives read directly) against ordinary device
memory, for the device's own compute: bandwidth of `F.linear` with one row (a decode
projection, the skinny-matmul kernel streaming its weight) and of a large elementwise
add. Shared memory has 4 KiB pages unless the kernel gives shared memory transparent
huge pages (/sys/kernel/mm/transparent_hugepage/shmem_enabled); ordinary device memory
asks for 2 MiB pages. Each memory kind runs in its own fresh process, alternating for
--rounds rounds, fastest round kept; compare the two columns of one run.

    python benchmarks/shared_memory.py [--rounds 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def measure(reps):
    import torch
    import torch.nn.functional as F

    dev = torch.device("neuron", 0)
    # Weights cycled through copies totalling 256 MB, so every call reads from memory.
    ws = [torch.randn(2048, 768, dtype=torch.bfloat16, device=dev) for _ in range(256 << 20 >> 22)]
    x = torch.randn(1, 768, dtype=torch.bfloat16, device=dev)
    a, b = torch.randn(32 << 20, device=dev), torch.randn(32 << 20, device=dev)

    def timed(fn, n):
        fn()
        torch.neuron.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        torch.neuron.synchronize()
        return (time.perf_counter() - t0) / n

    linear = timed(lambda i=0: F.linear(x, ws[i % len(ws)]), reps)
    add = timed(lambda i=0: a.add_(b), max(1, reps // 50))
    return {"linear": ws[0].numel() * 2 / linear / 1e9, "add": 3 * a.numel() * 4 / add / 1e9,
            "shared": os.environ["TORCHNEURON_DIST_SHARED_MEMORY"]}


def child_run(shared, reps):
    env = dict(os.environ, TORCHNEURON_DIST_SHARED_MEMORY=shared)
    out = subprocess.run([sys.executable, __file__, "--child", str(reps)], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    with open("/sys/kernel/mm/transparent_hugepage/shmem_enabled") as f:
        print(f"shmem_enabled: {f.read().strip()}; fastest of {args.rounds} rounds, GB/s")
    best = {"0": {}, "1": {}}
    for _ in range(args.rounds):
        for shared in ("0", "1"):
            r = child_run(shared, args.reps)
            for k in ("linear", "add"):
                best[shared][k] = max(best[shared].get(k, 0.0), r[k])
    print(f"{'case':<34}{'ordinary':>10}{'shared':>10}{'shared/ordinary':>17}")
    for k, what in (("linear", "F.linear bf16 1 x 768 -> 2048"), ("add", "add_ float32 32M elements")):
        print(f"{what:<34}{best['0'][k]:>10.2f}{best['1'][k]:>10.2f}{best['1'][k] / best['0'][k]:>17.2f}")


if __name__ == "__main__":
    main()
