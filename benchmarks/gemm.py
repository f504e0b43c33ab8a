"""float32 matrix products with many rows: what a training step of the ~100M
Qwen3-style model of train.py (512 tokens a step) multiplies, and eager
attention's batched products, on `neuron` with the library chosen for this
CPU (TORCHNEURON_FLOAT32_GEMM=auto), on `neuron` with ATen's choice
(=aten: MKL), and on PyTorch CPU eager (MKL). Then products of bfloat16
operands cast to float32 (TRL's LM-head gradients, `acc.addmm_(a.float(),
b.float())`), compiled on `neuron` (one mixed-precision GEMM at avx512_bf16),
compiled on `neuron` with the kernels capped below avx512_bf16 (the casts and
the float32 GEMM), and on PyTorch CPU eager.

    python benchmarks/gemm.py [--reps N] [--rounds R]

Each peer runs in its own fresh process (fresh_process.py); neuron products
are queued back to back and the stream synchronized. Reports GFLOP/s per
peer and the ratios neuron/CPU and neuron/neuron-with-ATen's-choice (higher
is better for neuron). The machine's other load shows in every column:
compare ratios of one run, and repeat (--rounds keeps each case's fastest).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

from fresh_process import isa_line

# name: (a's shape, b's shape, b transposed from a stored [n, k] weight,
#        the row length of a wider buffer the product is written into with out=, or None)
CASES = {
    "q/o projection 512x768 @ 768x768": ((512, 768), (768, 768), True, None),
    "gate/up 512x768 @ 768x2048": ((512, 768), (2048, 768), True, None),
    "down 512x2048 @ 2048x768": ((512, 2048), (768, 2048), True, None),
    "LM head 512x768 @ 768x32000": ((512, 768), (32000, 768), True, None),
    # TRL's chunked log-probabilities: mm(hidden, weight.t(), out=a tile of a wider buffer)
    "LM head into a row tile, out= (TRL)": ((510, 768), (32000, 768), True, 32768),
    "input grad of gate 512x2048 @ 2048x768": ((512, 2048), (2048, 768), False, None),
    "weight grad of gate 2048x512 @ 512x768": ((2048, 512), (512, 768), False, None),
    # eager attention (batch 2 x 12 heads, 256 tokens, head size 64): bmm
    "attention scores 24x256x64 @ 24x64x256": ((24, 256, 64), (24, 256, 64), True, None),
    "attention values 24x256x256 @ 24x256x64": ((24, 256, 256), (24, 256, 64), False, None),
}
# name: (a's shape, b's shape, a transposed from a stored [k, m] tile): acc [m, n] += a @ b
MIXED_CASES = {
    "LM-head input grad 510x32000 @ 32000x768": ((510, 32000), (32000, 768), False),
    "LM-head weight grad 32000x510 @ 510x768": ((32000, 510), (510, 768), True),
}
PEERS = {"cpu": ("cpu", {}), "neuron-aten": ("neuron", {"TORCHNEURON_FLOAT32_GEMM": "aten"}),
         "neuron": ("neuron", {}), "neuron-casts": ("neuron", {})}


def casts_level():
    """The kernels' level just below avx512_bf16 on this CPU: there the
    compiler keeps the casts and the float32 GEMM."""
    import torchneuron

    levels = [lv for lv in torchneuron.supported_kernel_isas() if lv != "avx512_bf16"]
    return levels[-1]


def accumulate_upcast(acc, a, b):
    acc.addmm_(a.float(), b.float())
    return acc


def measure_mixed(device, reps):
    g = torch.Generator().manual_seed(0)
    product = accumulate_upcast if device.type == "cpu" else torch.compile(accumulate_upcast, backend="neuron")
    out = {}
    for name, (a_shape, b_shape, transposed) in MIXED_CASES.items():
        a = torch.randn(*(a_shape[::-1] if transposed else a_shape), generator=g).bfloat16().to(device)
        a = a.t() if transposed else a
        b = torch.randn(*b_shape, generator=g).bfloat16().to(device)
        acc = torch.zeros(a.shape[0], b.shape[1], device=device)
        flops = 2 * a.shape[0] * a.shape[1] * b.shape[1]
        n = max(3, min(reps, int(reps * 4e8 / flops)))
        for _ in range(2):
            product(acc, a, b)
        if device.type == "neuron":
            torch.neuron.synchronize(device)
        t = time.perf_counter()
        for _ in range(n):
            product(acc, a, b)
        if device.type == "neuron":
            torch.neuron.synchronize(device)
        out[name] = flops * n / (time.perf_counter() - t) / 1e9
    return out


def measure(peer, reps):
    device = torch.device(PEERS[peer][0])
    out = measure_mixed(device, reps) if peer != "neuron-aten" else {}
    if peer == "neuron-casts":
        return out
    g = torch.Generator().manual_seed(0)
    for name, (a_shape, b_shape, transposed, row_length) in CASES.items():
        a = torch.randn(*a_shape, generator=g).to(device)
        b = torch.randn(*b_shape, generator=g).to(device)
        b = b.transpose(-1, -2) if transposed else b
        flops = 2 * a.shape[:-1].numel() * a.shape[-1] * b.shape[-1]
        product = torch.bmm if a.dim() == 3 else torch.mm
        kw = {}
        if row_length is not None:
            kw["out"] = torch.empty(a.shape[0], row_length, device=device)[:, :b.shape[1]]
        n = max(3, min(reps, int(reps * 4e8 / flops)))

        def sync():
            if device.type == "neuron":
                torch.neuron.synchronize(device)

        product(a, b, **kw)
        product(a, b, **kw)
        sync()
        t = time.perf_counter()
        for _ in range(n):
            product(a, b, **kw)
        sync()
        out[name] = flops * n / (time.perf_counter() - t) / 1e9
    if device.type == "neuron":
        import torchneuron

        out["library"] = torchneuron.float32_gemm_library()
    return out


def run_peer(peer, reps):
    device, extra = PEERS[peer]
    env = dict(os.environ, **extra)
    if peer == "neuron-casts":
        env["TORCHNEURON_ISA"] = casts_level()
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    r = subprocess.run([sys.executable, __file__, "--child", peer, str(reps)], env=env,
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{peer} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", nargs=2, metavar=("PEER", "REPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]))))
        return
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; each peer in its own process", flush=True)
    print(isa_line(), flush=True)
    best = {}
    for _ in range(args.rounds):
        for peer in PEERS:
            r = run_peer(peer, args.reps)
            best[peer] = {k: (max(v, best[peer][k]) if peer in best and not isinstance(v, str) else v)
                          for k, v in r.items()}
    print(f"neuron's float32 library: {best['neuron']['library']} (neuron-aten: {best['neuron-aten']['library']})")
    print(f"{'case':<42}{'cpu':>8}{'n-aten':>8}{'neuron':>8}{'vs cpu':>8}{'vs aten':>9}   (GFLOP/s)")
    for name in CASES:
        c, a, n = best["cpu"][name], best["neuron-aten"][name], best["neuron"][name]
        print(f"{name:<42}{c:>8.0f}{a:>8.0f}{n:>8.0f}{n / c:>7.2f}x{n / a:>8.2f}x", flush=True)
    print(f"\nbfloat16 operands cast to float32, acc += a @ b; casts: neuron kernels at {casts_level()}")
    print(f"{'case':<42}{'cpu':>8}{'casts':>8}{'neuron':>8}{'vs cpu':>8}{'vs casts':>9}   (GFLOP/s)")
    for name in MIXED_CASES:
        c, a, n = best["cpu"][name], best["neuron-casts"][name], best["neuron"][name]
        print(f"{name:<42}{c:>8.0f}{a:>8.0f}{n:>8.0f}{n / c:>7.2f}x{n / a:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
