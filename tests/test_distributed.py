"""torch.distributed's "neuron" backend under real torchrun launches.

Each test starts `python -m torch.distributed.run` on a worker script of
tests/distributed_workers/ (several checks per launch keep the wall time low),
bounded by a timeout after which the whole launch is killed. Workers compare
with references computed on CPU.
"""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
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
    child_env = launch_env(env)
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


def launch_env(env=None):
    child_env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    child_env.update({
        "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(WORKERS)]),
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "1",  # the workers only `import torch`
        "OMP_NUM_THREADS": "1",
        "TORCHNEURON_DEVICE_MEMORY": "2GiB",
    })
    child_env.update(env or {})
    return child_env


def torchrun_nodes(script, *args, nodes, nproc=1, master_addr="127.0.0.1", timeout=240):
    """Runs `script` as len(nodes) torchrun agents (torchrun's nodes, static rendezvous at
    master_addr), each `nproc` ranks; nodes[i] = (command prefix, extra environment).
    Returns (returncodes, outputs), every agent killed at the timeout."""
    port = free_port()
    procs = []
    for i, (prefix, env) in enumerate(nodes):
        cmd = [*prefix, sys.executable, "-m", "torch.distributed.run", f"--nnodes={len(nodes)}",
               f"--node-rank={i}", f"--nproc-per-node={nproc}", f"--master-addr={master_addr}",
               f"--master-port={port}", "--max-restarts=0", str(WORKERS / script), *args]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=launch_env(env), cwd=str(ROOT), start_new_session=True))
    deadline = time.monotonic() + timeout
    codes, outs = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, _ = p.communicate()
            pytest.fail(f"{script} {args} did not finish in {timeout} s:\n{out[-6000:]}")
        codes.append(p.returncode)
        outs.append(out)
    return codes, "\n".join(outs)


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


# The 3-rank launch puts device memory in shared arenas: large collectives read peers'
# buffers directly.
@pytest.mark.parametrize("nproc,mode,shared", [(2, "device_id", "0"), (3, "mixed", "1")])
def test_every_collective_matches_cpu_reference(nproc, mode, shared):
    code, out = torchrun("collectives.py", mode, nproc=nproc, env={"TORCHNEURON_DIST_SHARED_MEMORY": shared})
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
    """Also collectives in torch.compile'd graphs (distributed_workers/compiled.py): functional
    collectives and a tensor-parallel MLP run inside compiled programs, equal to eager."""
    code, out = torchrun("parallel.py", nproc=2)
    assert code == 0, out[-8000:]
    for r in range(2):
        for what in ("fsdp2", "fsdp2 mixed precision", "tensor parallel", "sequence parallel",
                     "compiled functional collectives", "compiled and eager collectives in order",
                     "compiled mismatch", "compiled tensor parallel", "compiled timeout",
                     "llama-style sequence parallel", "compiled llama-style sequence parallel",
                     "compiled llama-style fsdp2"):
            assert f"rank {r}: {what} OK" in out, out[-8000:]


def test_compiled_collectives_under_launch_blocking():
    """With NEURON_LAUNCH_BLOCKING=1 every launch waits for its work: a program's collectives
    are queued by its steps, not at the launch (where they would wait for the program)."""
    code, out = torchrun("compiled.py", nproc=2, timeout=120, env={"NEURON_LAUNCH_BLOCKING": "1"})
    assert code == 0, out[-8000:]
    for r in range(2):
        for what in ("compiled functional collectives", "compiled and eager collectives in order", "compiled mismatch"):
            assert f"rank {r}: {what} OK" in out, out[-8000:]


def test_two_dimensional_fsdp2_by_tensor_parallel_equals_single_device():
    code, out = torchrun("two_d.py", nproc=4)
    assert code == 0, out[-8000:]
    for r in range(4):
        assert f"rank {r}: 2-D OK" in out, out[-8000:]
        assert f"rank {r}: llama-style 2-D OK" in out, out[-8000:]



def assert_multi_host_run(codes, out, world):
    assert codes == [0] * len(codes), out[-10000:]
    for r in range(world):
        assert f"rank {r}: multi-host collectives OK" in out, out[-10000:]
        assert f"rank {r}: multi-host mismatches OK" in out, out[-10000:]
    for r in range(world - 1):
        assert f"rank {r}: multi-host dead peer OK" in out, out[-10000:]


def test_two_hosts_on_loopback_run_hierarchical_collectives():
    """Two torchrun nodes of two ranks on this machine, made two hosts by
    TORCHNEURON_DIST_HOST_ID: shared memory inside each, gloo over TCP between them."""
    nodes = [((), {"TORCHNEURON_DIST_HOST_ID": f"node{i}", "FAULT_TIMEOUT": "20"}) for i in range(2)]
    codes, out = torchrun_nodes("multi_host.py", "full", "2", nodes=nodes, nproc=2)
    assert_multi_host_run(codes, out, 4)
    for r in range(4):  # collectives inside compiled programs, across hosts
        for what in ("compiled functional collectives", "compiled and eager collectives in order", "compiled mismatch"):
            assert f"rank {r}: {what} OK" in out, out[-10000:]


@pytest.fixture
def two_network_namespaces():
    """Two network namespaces joined by a veth pair (10.213.0.1 and .2), removed afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command (iproute2) to make network namespaces")
    if os.geteuid() != 0:
        pytest.skip("making network namespaces (ip netns add) needs root")
    tag = f"tn{os.getpid() % 100000}"
    names, links = [f"{tag}a", f"{tag}b"], [f"{tag}va", f"{tag}vb"]
    setup = [["netns", "add", names[0]], ["netns", "add", names[1]],
             ["link", "add", links[0], "type", "veth", "peer", "name", links[1]]]
    for i in range(2):
        setup += [["link", "set", links[i], "netns", names[i]],
                  ["-n", names[i], "addr", "add", f"10.213.0.{i + 1}/24", "dev", links[i]],
                  ["-n", names[i], "link", "set", links[i], "up"],
                  ["-n", names[i], "link", "set", "lo", "up"]]
    try:
        for args in setup:
            r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
            if r.returncode != 0:
                pytest.skip(f"cannot make network namespaces here: ip {' '.join(args)}: {r.stderr.strip()}")
        yield [(names[i], links[i], f"10.213.0.{i + 1}") for i in range(2)]
    finally:
        for n in names:  # deleting a namespace deletes its end of the veth pair
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", links[0]], capture_output=True, timeout=30)


def test_ranks_in_separate_network_namespaces_are_separate_hosts(two_network_namespaces):
    """One rank per network namespace, joined by a veth pair only: the namespace makes
    them two hosts (they share /dev/shm and the hostname), gloo runs over the veth."""
    nodes = [(("ip", "netns", "exec", ns), {"GLOO_SOCKET_IFNAME": link, "FAULT_TIMEOUT": "20"})
             for ns, link, _ in two_network_namespaces]
    codes, out = torchrun_nodes("multi_host.py", "quick", "2", nodes=nodes, nproc=1,
                                master_addr=two_network_namespaces[0][2])
    assert_multi_host_run(codes, out, 2)


def test_abort_and_destroy_release_a_rank_stuck_in_a_collective():
    code, out = torchrun("abort.py", nproc=2, timeout=150)
    assert code == 0, out[-8000:]
    for r in range(2):
        for how in ("abort", "destroy"):
            assert f"rank {r}: {how} releases a stuck collective OK" in out, out[-8000:]
        assert f"rank {r}: re-init after abort and destroy OK" in out, out[-8000:]


def test_llama_fsdp2_tensor_parallel_checkpoints_and_tp_plan_auto(tmp_path):
    """A small LlamaForCausalLM: FSDP2, tensor parallelism and tensor + sequence
    parallelism on 2 ranks equal one device; saved with torch.distributed.checkpoint and exported as a Transformers
    safetensors checkpoint; reloaded (resharded) on 3 ranks; tp_plan="auto" on 3 ranks
    gives the single-device logits."""
    code, out = torchrun("llama.py", "train", str(tmp_path), nproc=2, timeout=240)
    assert code == 0, out[-8000:]
    for r in range(2):
        for what in ("fsdp2", "tensor parallel", "sequence parallel", "checkpoint and export"):
            assert f"rank {r}: llama {what} OK" in out, out[-8000:]
    code, out = torchrun("llama.py", "reload", str(tmp_path), nproc=3, timeout=240)
    assert code == 0, out[-8000:]
    for r in range(3):
        assert f"rank {r}: llama dcp reload at world size 3 OK" in out, out[-8000:]
        assert f"rank {r}: llama tp_plan auto OK" in out, out[-8000:]
