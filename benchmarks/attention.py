"""Attention benchmark: `scaled_dot_product_attention` on `neuron` (the device's
attention kernel, kernels/) against PyTorch CPU (its flash kernel) in one run.

    python benchmarks/attention.py [--reps N] [--rounds R]

Shapes of a ~100M Llama-style model (12 query heads, 4 key/value heads, head
size 64): prefill of 512 and 2048 tokens (causal, float32 and bfloat16), decode
against a static KV cache of 1024 slots with 600 filled (batch 1 and 8), and a
training step (forward + backward, causal, 512 tokens). Reports milliseconds per
call, the GFLOP/s of the work the mask leaves (2 matmuls, causal halved), and the
ratio CPU/neuron (higher is better). Each device runs in its own fresh process
(fresh_process.py) and is timed with its work finished: neuron calls are queued
back to back and the stream synchronized. On a shared machine, --rounds R
measures each device R times, alternating fresh processes, and keeps each
case's fastest round (the one least disturbed by other load).
"""
import time

import torch
import torch.nn.functional as F

from fresh_process import device_and_reps_main

CASES = [
    # name, dtype, B, L, S, filled, causal, backward
    ("prefill 512", "float32", 1, 512, 512, None, True, False),
    ("prefill 512", "bfloat16", 1, 512, 512, None, True, False),
    ("prefill 2048", "float32", 1, 2048, 2048, None, True, False),
    ("decode bs1, cache 600/1024", "float32", 1, 1, 1024, 600, False, False),
    ("decode bs8, cache 600/1024", "float32", 8, 1, 1024, 600, False, False),
    ("decode bs8, cache 600/1024", "bfloat16", 8, 1, 1024, 600, False, False),
    ("train fwd+bwd 512", "float32", 1, 512, 512, None, True, True),
]


def case_inputs(device, dtype, B, L, S, filled, causal, grad):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, L, 12, 64, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(B, 4, S, 64, generator=g).to(dtype)
    v = torch.randn(B, 4, S, 64, generator=g).to(dtype)
    q, k, v = (t.to(device).requires_grad_(grad) for t in (q, k, v))
    mask = None
    if filled is not None:
        mask = (torch.arange(S) < filled).view(1, 1, 1, S).to(device)
    return q, k, v, mask


def flops(B, L, S, filled, causal):
    keys = filled if filled is not None else S
    pairs = B * 12 * L * keys * (0.5 if causal else 1.0)
    return 4 * pairs * 64  # QK^T and PV, a multiply-add each


def time_call(device, fn, reps):
    def sync():
        if device == "neuron":
            torch.neuron.synchronize()
    for _ in range(2):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - t) / reps


def measure(device, reps):
    """Seconds per call of every case on one device, in this process."""
    times = []
    for name, dtype, B, L, S, filled, causal, grad in CASES:
        q, k, v, mask = case_inputs(device, getattr(torch, dtype), B, L, S, filled, causal, grad)

        def fn():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                                 enable_gqa=True)
            if grad:
                out.sum().backward()
        times.append(time_call(device, fn, reps))
    return times


def main():
    result = device_and_reps_main(__doc__, 10, measure)
    if result is None:
        return
    cpu, neuron, reps = result
    print(f"{'case':<28}{'dtype':<10}{'cpu ms':>10}{'neuron ms':>11}{'neuron GFLOP/s':>16}{'ratio':>8}")
    for (name, dtype, B, L, S, filled, causal, grad), c, n in zip(CASES, cpu, neuron):
        work = flops(B, L, S, filled, causal) * (3.5 if grad else 1.0)  # backward ~2.5x forward
        print(f"{name:<28}{dtype:<10}{c * 1e3:>10.3f}{n * 1e3:>11.3f}{work / n / 1e9:>16.1f}"
              f"{c / n:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
