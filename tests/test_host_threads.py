"""Host threads hand the cores to the device (TORCHNEURON_HOST_THREADS): the
first neuron work a host thread issues drops its own intra-op threads, so the
process never holds more OpenMP threads than the device's workers need."""
import pytest

CODE = """
    import threading
    import torch
    before = torch.get_num_threads()
    cpu = torch.randn(64, 64)
    x = cpu.to("neuron")
    y = (x * 2).sum()
    torch.neuron.synchronize()
    after = torch.get_num_threads()
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start(); t.join()
    ok = torch.allclose((cpu @ cpu), (x @ x).cpu(), atol=1e-4)  # CPU and device still compute
    print(before, after, seen[0], ok)
"""


def test_a_host_thread_keeps_one_thread_after_neuron_work(run_python):
    before, after, other, ok = run_python(CODE, env={"OMP_NUM_THREADS": "2"}).stdout.split()
    assert (before, after, ok) == ("2", "1", "True")
    assert other == "2"  # only the thread that issued neuron work changes


def test_the_setting_can_keep_more_or_leave_host_threads_alone(run_python):
    out = run_python(CODE, env={"OMP_NUM_THREADS": "2", "TORCHNEURON_HOST_THREADS": "0"}).stdout.split()
    assert out[:2] == ["2", "2"] and out[3] == "True"


def test_a_bad_setting_names_the_variable(run_python):
    child = run_python(CODE, env={"TORCHNEURON_HOST_THREADS": "many"}, ok=False)
    assert "TORCHNEURON_HOST_THREADS='many'" in child.stderr
    assert "expected a thread count" in child.stderr
