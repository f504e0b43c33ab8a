"""Runs one device's half of a benchmark in a fresh process.

Each device is measured in its own process: once the neuron device has run, a
host thread keeps one intra-op thread (TORCHNEURON_HOST_THREADS), and the
device's OpenMP teams shorten libgomp's spin-waits for every thread of the
process, which slowed CPU eager there by up to a third. CPU runs as plain
PyTorch (the neuron backend not loaded), as its users run it.
"""
import json
import os
import subprocess
import sys


def measure_in_fresh_process(script, device_name, *args):
    """Runs `script --child DEVICE ARGS...` and returns the JSON on its last line."""
    env = dict(os.environ)
    if device_name == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, script, "--child", device_name, *(str(a) for a in args)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def isa_line():
    """The instruction sets each side runs at: the neuron kernels' level
    (TORCHNEURON_ISA caps it) and ATen's CPU capability with the caps of
    oneDNN and MKL, the BLAS behind ATen's GEMMs (ATEN_CPU_CAPABILITY,
    ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS). To measure AVX2 code on an
    AVX-512 machine fairly, cap both sides."""
    import torch
    import torchneuron

    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "") or "best"
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS", "") or "best"
    return (f"ISA: neuron kernels {torchneuron.kernel_isa()} (of "
            f"{', '.join(torchneuron.supported_kernel_isas())}); CPU eager: ATen "
            f"{torch.backends.cpu.get_cpu_capability()}, oneDNN {onednn}, MKL {mkl}")


def fastest(a, b):
    """Per-case minimum of two rounds' figures (lists or dicts of seconds)."""
    if isinstance(a, dict):
        return {k: min(v, b[k]) for k, v in a.items()}
    return [min(x, y) for x, y in zip(a, b)]


def device_and_reps_main(doc, default_reps, measure):
    """The command line shared by benchmarks whose figures depend only on a
    device and a repeat count: with --child DEVICE REPS (internal) prints
    measure(DEVICE, REPS) as JSON and returns None; otherwise returns
    (cpu, neuron, reps), each device's figures from its own fresh process.
    On a shared machine, --rounds R measures each device R times, alternating
    fresh processes, and keeps each case's fastest round (the one least
    disturbed by other load)."""
    import argparse
    import inspect

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--reps", type=int, default=default_reps)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each device this many times and keep each case's fastest")
    parser.add_argument("--child", nargs=2, metavar=("DEVICE", "REPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]))))
        return None
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
          "each device measured in its own process", flush=True)
    print(isa_line(), flush=True)
    script = inspect.getmodule(measure).__file__
    cpu = measure_in_fresh_process(script, "cpu", args.reps)
    neuron = measure_in_fresh_process(script, "neuron", args.reps)
    for _ in range(args.rounds - 1):
        cpu = fastest(cpu, measure_in_fresh_process(script, "cpu", args.reps))
        neuron = fastest(neuron, measure_in_fresh_process(script, "neuron", args.reps))
    if args.rounds > 1:
        print(f"fastest of {args.rounds} rounds per case and device", flush=True)
    return cpu, neuron, args.reps
