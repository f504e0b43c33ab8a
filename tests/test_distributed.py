"""torch.distributed's "neuron" backend under real torchrun launches.

Each test starts `python -m torch.distributed.run` on a worker script of
tests/distributed_workers/ (several checks per launch keep the wall time low),
bounded by a timeout after which the whole launch is killed. Workers compare
with references computed on CPU.
"""
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from conftest import CONFIG_VARS

ROOT = Path(__file__).resolve().parents[1]
WORKERS = Path(__file__).resolve().parent / "distributed_workers"

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="this torch has no torch.distributed")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shm_segments():
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("neuroncoll-")}
    except FileNotFoundError:  # pragma: no cover - not Linux
        return set()


def torchrun(script, *args, nproc=2, timeout=150, env=None):
    """Runs `script` on `nproc` local ranks; returns (returncode, output)."""
    child_env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    child_env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(WORKERS)]),
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",  # the workers only `import torch`
        "OMP_NUM_THREADS": "1",
        "TORCHNEURON_DEVICE_MEMORY": "2GiB",
    })
    child_env.update(env or {})
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{free_port()}", "--max-restarts=0",
           str(WORKERS / script), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=child_env, cwd=str(ROOT), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers
        out, _ = proc.communicate()
        pytest.fail(f"{script} {args} did not finish in {timeout} s:\n{out[-6000:]}")
    return proc.returncode, out


@pytest.fixture(autouse=True)
def no_leftover_segments():
    before = shm_segments()
    yield
    left = shm_segments() - before
    assert not left, f"shared memory left in /dev/shm: {sorted(left)}"


def test_backend_is_registered_for_the_neuron_device():
    assert dist.Backend.NEURON == "neuron"
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert "neuron" in dist.Backend.backend_capability


def test_one_process_group_without_torchrun():
    script = (
        "import torch, torch.distributed as dist\n"
        f"dist.init_process_group('neuron', rank=0, world_size=1, init_method='tcp://127.0.0.1:{free_port()}')\n"
        "t = torch.arange(5.0, device='neuron')\n"
        "dist.all_reduce(t, op=dist.ReduceOp.AVG)\n"
        "out = [torch.empty(5, device='neuron')]\n"
        "dist.all_gather(out, t * 2)\n"
        "dist.barrier(device_ids=[0])\n"
        "print(t.cpu().tolist(), out[0].cpu().tolist())\n"
        "dist.destroy_process_group()\n")
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    env["PYTHONPATH"] = str(ROOT / "python")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=env, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[0.0, 1.0, 2.0, 3.0, 4.0] [0.0, 2.0, 4.0, 6.0, 8.0]"


@pytest.mark.parametrize("nproc,mode", [(2, "device_id"), (3, "mixed")])
def test_every_collective_matches_cpu_reference(nproc, mode):
    code, out = torchrun("collectives.py", mode, nproc=nproc)
    assert code == 0, out[-8000:]
    for r in range(nproc):
        assert f"rank {r}: collectives OK" in out, out[-8000:]


def test_ddp_equals_single_device_and_memory_cap_counts_local_ranks():
    code, out = torchrun("ddp.py", nproc=2, env={"TORCHNEURON_DEVICE_MEMORY": "1TiB"})
    assert code == 0, out[-8000:]
    assert "rank 0: ddp OK" in out and "rank 1: ddp OK" in out, out[-8000:]


def test_mismatch_and_early_exit_give_errors_not_hangs():
    code, out = torchrun("faults.py", nproc=2, timeout=120, env={"FAULT_TIMEOUT": "4"})
    assert code == 0, out[-8000:]
    for r in range(2):
        assert f"rank {r}: mismatches OK" in out, out[-8000:]
    assert "rank 0: timeout OK" in out, out[-8000:]
    # The survivor's error names the rank that left.
    timeouts = [line for line in out.splitlines() if "rank 0:" in line and "timeout" in line.lower()]
    assert any("1" in line.split("timeout", 1)[-1] for line in timeouts), out[-8000:]


def test_init_device_mesh_fsdp2_tensor_and_sequence_parallel_equal_single_device():
    code, out = torchrun("parallel.py", nproc=2)
    assert code == 0, out[-8000:]
    for r in range(2):
        for what in ("fsdp2", "fsdp2 mixed precision", "tensor parallel", "sequence parallel"):
            assert f"rank {r}: {what} OK" in out, out[-8000:]


def test_two_dimensional_fsdp2_by_tensor_parallel_equals_single_device():
    code, out = torchrun("two_d.py", nproc=4)
    assert code == 0, out[-8000:]
    for r in range(4):
        assert f"rank {r}: 2-D OK" in out, out[-8000:]

