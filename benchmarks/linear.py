"""Linear-layer benchmark: `F.linear` with few rows (a decode step's
projections) on `neuron` (the skinny-matmul kernel, kernels/) against PyTorch
CPU eager (oneDNN/MKL GEMM).

    python benchmarks/linear.py [--reps N] [--rounds R]

Shapes of a ~100M Llama-style model (hidden 768, MLP 2048, vocabulary 16000)
with 1 to 16 rows (the kernel's range), float32, bfloat16 and float16.
Weights are cycled through copies totalling 256 MB, more than any cache, so
each call reads its weight from memory, as a decode step does.
Reports microseconds per call, the weight bytes read per second, and the ratio
CPU/neuron (higher is better). Each device runs in its own fresh process
(fresh_process.py); neuron calls are queued back to back and the stream
synchronized. The machine's other load shows in both columns; compare ratios
of one run, and repeat.
"""
import time

import torch
import torch.nn.functional as F

from fresh_process import device_and_reps_main

SHAPES = {  # (in_features, out_features): row counts
    (768, 768): [1, 8],
    (768, 2048): [1, 2, 3, 4, 5, 6, 8, 12, 16],
    (2048, 768): [1, 4, 16],
    (768, 16000): [1, 8, 16],
}
DTYPES = ["float32", "bfloat16", "float16"]
WEIGHT_BYTES = 256 << 20  # cycled through, per shape


def cases():
    for dt in DTYPES:
        for (k, n), row_counts in SHAPES.items():
            for r in row_counts:
                yield dt, r, k, n


def seconds_per_call(device, weights, x, reps):
    def sync():
        if device.type == "neuron":
            torch.neuron.synchronize(device)

    with torch.no_grad():
        for w in weights[:4]:
            F.linear(x, w)  # first calls of a signature run synchronously
        sync()
        t = time.perf_counter()
        for i in range(reps):
            F.linear(x, weights[i % len(weights)])
        sync()
    return (time.perf_counter() - t) / reps


def measure(device_name, reps):
    device = torch.device(device_name)
    result = {}
    for dt in DTYPES:
        dtype = getattr(torch, dt)
        for (k, n), row_counts in SHAPES.items():
            g = torch.Generator().manual_seed(0)
            one = torch.randn(n, k, generator=g).to(dtype)
            copies = max(4, -(-WEIGHT_BYTES // (one.numel() * one.element_size())))
            weights = [(one + i).to(device) for i in range(copies)]
            for r in row_counts:
                x = torch.randn(r, k, generator=g).to(dtype).to(device)
                result[f"{dt} {r}x{k}x{n}"] = seconds_per_call(device, weights, x, reps)
            del weights
    return result


def main():
    result = device_and_reps_main(__doc__, 200, measure)
    if result is None:
        return
    cpu, neuron, _ = result
    print(f"{'dtype':<10}{'rows x in x out':<18}{'cpu us':>9}{'neuron us':>11}"
          f"{'cpu GB/s':>10}{'neuron GB/s':>13}{'ratio':>8}")
    for dt, r, k, n in cases():
        size = torch.tensor([], dtype=getattr(torch, dt)).element_size()
        key = f"{dt} {r}x{k}x{n}"
        c, d = cpu[key], neuron[key]
        gbs = k * n * size / 1e9
        print(f"{dt:<10}{f'{r} x {k} x {n}':<18}{c * 1e6:>9.1f}{d * 1e6:>11.1f}"
              f"{gbs / c:>10.1f}{gbs / d:>13.1f}{c / d:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
