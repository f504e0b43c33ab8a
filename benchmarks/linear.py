"""Linear-layer benchmark: `F.linear` with few rows (a decode step's
projections) on `neuron` (the skinny-matmul kernel, kernels/) against PyTorch
CPU eager (oneDNN/MKL GEMM).

    python benchmarks/linear.py [--reps N]

Shapes of a ~100M Llama-style model (hidden 768, MLP 2048, vocabulary 16000)
with 1, 8 and 16 rows, float32 and bfloat16. Weights are cycled through copies
totalling 256 MB, more than any cache, so each call reads its weight from
memory, as a decode step does.
Reports microseconds per call, the weight bytes read per second, and the ratio
CPU/neuron (higher is better). Each device runs in its own fresh process
(fresh_process.py); neuron calls are queued back to back and the stream
synchronized.
"""
import time

import torch
import torch.nn.functional as F

from fresh_process import device_and_reps_main

SHAPES = [  # (rows, in_features, out_features)
    (1, 768, 768), (1, 768, 2048), (1, 2048, 768), (1, 768, 16000),
    (8, 768, 2048), (8, 768, 16000), (16, 768, 2048),
]
DTYPES = ["float32", "bfloat16"]
WEIGHT_BYTES = 256 << 20  # cycled through, per shape


def seconds_per_call(device, dtype, rows, k, n, reps):
    g = torch.Generator().manual_seed(0)
    one = torch.randn(n, k, generator=g).to(dtype)
    copies = max(4, -(-WEIGHT_BYTES // (one.numel() * one.element_size())))
    weights = [(one + i).to(device) for i in range(copies)]
    x = torch.randn(rows, k, generator=g).to(dtype).to(device)

    def sync():
        if device.type == "neuron":
            torch.neuron.synchronize(device)

    with torch.no_grad():
        for w in weights[:4]:
            F.linear(x, w)  # first calls of a signature run synchronously
        sync()
        t = time.perf_counter()
        for i in range(reps):
            F.linear(x, weights[i % copies])
        sync()
    return (time.perf_counter() - t) / reps


def measure(device_name, reps):
    device = torch.device(device_name)
    return {f"{dt} {r}x{k}x{n}": seconds_per_call(device, getattr(torch, dt), r, k, n, reps)
            for dt in DTYPES for r, k, n in SHAPES}


def main():
    result = device_and_reps_main(__doc__, 200, measure)
    if result is None:
        return
    cpu, neuron, _ = result
    print(f"{'dtype':<10}{'rows x in x out':<18}{'cpu us':>9}{'neuron us':>11}"
          f"{'cpu GB/s':>10}{'neuron GB/s':>13}{'ratio':>8}")
    for dt in DTYPES:
        size = torch.tensor([], dtype=getattr(torch, dt)).element_size()
        for r, k, n in SHAPES:
            key = f"{dt} {r}x{k}x{n}"
            c, d = cpu[key], neuron[key]
            gbs = k * n * size / 1e9
            print(f"{dt:<10}{f'{r} x {k} x {n}':<18}{c * 1e6:>9.1f}{d * 1e6:>11.1f}"
                  f"{gbs / c:>10.1f}{gbs / d:>13.1f}{c / d:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
