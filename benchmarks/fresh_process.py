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
