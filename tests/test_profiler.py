"""Profiling on neuron: torch.profiler (Kineto, with the device's stream
timestamps) and the legacy torch.autograd.profiler path (timing events)."""
import json
import time

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import torchneuron

pytestmark = pytest.mark.timeout(60)

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def run_profiled(fn):
    with profile(activities=ACTIVITIES) as prof:
        fn()
        torch.neuron.synchronize()
    return prof


def device_events(prof):
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def cpu_events(prof, name):
    return [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name == name]


def chrome_trace(prof, tmp_path):
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def warm(*fns):
    # First calls of a signature run synchronously (docs/architecture.md):
    # warm up so that what is profiled is queued work.
    for fn in fns:
        fn()
    torch.neuron.synchronize()


@pytest.fixture
def mats():
    a = torch.randn(128, 128, device="neuron")
    b = torch.randn(128, 128, device="neuron")
    warm(lambda: a @ b, lambda: a + b, lambda: torch.relu(a))
    return a, b


def test_device_events_carry_op_names_and_times(mats):
    a, b = mats
    prof = run_profiled(lambda: torch.relu(a @ b + b))
    dev = device_events(prof)
    names = {e.name for e in dev}
    assert {"aten::mm", "aten::add.Tensor", "aten::relu"} <= names, names
    for e in dev:
        assert e.device_index == 0
        assert e.time_range.start >= 0
        assert e.time_range.end >= e.time_range.start
    for e in prof.events():
        assert e.cpu_time_total >= 0, (e.name, e.cpu_time_total)
        assert e.device_time_total >= 0, (e.name, e.device_time_total)
    # The host side: the op that queued the work, and the launch inside it.
    (mm,) = cpu_events(prof, "aten::mm")
    assert mm.device_time_total > 0
    assert [k.name for k in mm.kernels] == ["aten::mm"]
    launches = cpu_events(prof, "neuronrt::launch")
    assert len(launches) >= 3
    (dev_mm,) = [e for e in dev if e.name == "aten::mm"]
    assert dev_mm.time_range.start >= mm.time_range.start  # queued first, then run


def test_key_averages_have_device_columns(mats):
    a, b = mats
    prof = run_profiled(lambda: [a @ b for _ in range(3)])
    rows = {(r.key, r.device_type): r for r in prof.key_averages()}
    host = rows[("aten::mm", DeviceType.CPU)]
    assert host.count == 3
    assert host.device_time_total > 0 and host.self_device_time_total > 0
    device = rows[("aten::mm", DeviceType.PrivateUse1)]
    assert device.count == 3
    assert device.self_device_time_total == pytest.approx(host.self_device_time_total)
    assert host.cpu_time_total >= 0
    table = prof.key_averages().table(sort_by="device_time_total")
    assert "Self NEURON" in table and "NEURON total" in table


def test_chrome_trace_has_device_stream_tracks_linked_to_ops(mats, tmp_path):
    a, b = mats
    events = chrome_trace(run_profiled(lambda: a @ b), tmp_path)
    meta = {(e["name"], e["pid"], e.get("tid")): e["args"] for e in events if e.get("ph") == "M"}
    assert meta[("process_name", 0, 0)]["name"] == "neuron"
    assert meta[("thread_name", 0, 0)]["name"] == "stream 0"
    (kernel,) = [e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::mm"]
    assert (kernel["pid"], kernel["tid"]) == (0, 0)  # neuron:0, stream 0
    assert kernel["dur"] > 0
    (op,) = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    assert kernel["args"]["External id"] == op["args"]["External id"]
    (launch,) = [e for e in events if e.get("cat") == "privateuse1_runtime"
                 and e["args"].get("op") == "aten::mm"]
    assert (launch["pid"], launch["tid"]) == (op["pid"], op["tid"])
    assert op["ts"] <= launch["ts"] <= launch["ts"] + launch["dur"] <= op["ts"] + op["dur"]
    # A flow arrow from the launch on the host to the interval on the device.
    flow = kernel["args"]["correlation"]
    ends = {(e["ph"], e["pid"]) for e in events if e.get("cat") == "ac2g" and e["id"] == flow}
    assert ends == {("s", op["pid"]), ("f", 0)}


def test_record_function_spans_host_and_device(mats, tmp_path):
    a, b = mats

    def block():
        with record_function("my_block"):
            c = a @ b
            torch.relu(c + b)

    prof = run_profiled(block)
    (host,) = cpu_events(prof, "my_block")
    assert host.device_time_total > 0  # its ops' device time
    (span,) = [e for e in device_events(prof) if e.name == "my_block"]
    assert span.is_user_annotation
    inside = [e for e in device_events(prof) if e.name in ("aten::mm", "aten::relu")]
    assert len(inside) == 2
    assert span.time_range.start <= min(e.time_range.start for e in inside)
    assert span.time_range.end >= max(e.time_range.end for e in inside)
    events = chrome_trace(prof, tmp_path)
    (track,) = [e for e in events if e.get("cat") == "gpu_user_annotation"]
    assert (track["name"], track["pid"], track["tid"]) == ("my_block", 0, 0)


def test_device_time_of_a_matmul_chain_accounts_for_the_wall_time():
    x = torch.randn(512, 512, device="neuron")
    w = torch.randn(512, 512, device="neuron") / 512**0.5
    warm(lambda: x @ w)
    n = 8
    with profile(activities=ACTIVITIES) as prof:
        t0 = time.perf_counter()
        y = x
        for _ in range(n):
            y = y @ w
        torch.neuron.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6
    mms = [e for e in device_events(prof) if e.name == "aten::mm"]
    assert len(mms) == n
    device_us = sum(e.device_time_total for e in mms)
    # The worker runs them back to back while the host waits: nearly all of
    # the wall time is device time, and never more than the wall time.
    assert device_us <= wall_us * 1.02 + 200, (device_us, wall_us)
    assert device_us >= 0.6 * wall_us, (device_us, wall_us)


def test_profiling_off_keeps_no_records(mats):
    a, b = mats
    for _ in range(50):
        a + b
    torch.neuron.synchronize()
    assert torchneuron._C._profiler_record_count() == 0
    with profile(activities=ACTIVITIES) as prof:
        a @ b
        torch.neuron.synchronize()
        assert torchneuron._C._profiler_record_count() >= 1
    assert torchneuron._C._profiler_record_count() == 0
    for _ in range(50):
        torch.relu(a)
    torch.neuron.synchronize()
    assert torchneuron._C._profiler_record_count() == 0
    # Work between sessions does not leak into the next one.
    prof = run_profiled(lambda: a @ b)
    assert {e.name for e in device_events(prof)} == {"aten::mm"}


def test_two_streams_have_their_own_tracks(mats, tmp_path):
    a, b = mats
    side = torch.neuron.Stream()

    def work():
        a @ b
        with torch.neuron.stream(side):
            torch.relu(a)

    prof = run_profiled(work)
    by_name = {e.name: e for e in device_events(prof)}
    assert by_name["aten::mm"].device_resource_id == 0
    assert by_name["aten::relu"].device_resource_id == side.stream_id
    events = chrome_trace(prof, tmp_path)
    tracks = {e["tid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e["name"] == "thread_name" and e["pid"] == 0}
    assert tracks[0] == "stream 0"
    assert tracks[side.stream_id] == f"stream {side.stream_id}"
    (relu,) = [e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::relu"]
    assert relu["tid"] == side.stream_id


def test_synchronous_first_call_appears_on_its_stream(tmp_path):
    # nonzero's output shape depends on the data: it always runs synchronously
    # (a first call of a signature may not, once its shape class was validated)
    x = torch.randn(3, 41, device="neuron") > 0
    torch.neuron.synchronize()
    prof = run_profiled(lambda: torch.nonzero(x))
    events = chrome_trace(prof, tmp_path)
    (k,) = [e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::nonzero"]
    assert k["args"]["synchronous"] == 1 and k["tid"] == 0


def test_cpu_only_profiling_has_no_device_events(mats):
    a, b = mats
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        a @ b
        torch.neuron.synchronize()
    assert cpu_events(prof, "aten::mm")
    assert not device_events(prof)
    assert torchneuron._C._profiler_record_count() == 0


def test_legacy_profiler_times_ops_with_events(mats, capfd):
    a, b = mats
    with torch.autograd.profiler.profile(use_device="neuron") as prof:
        a @ b
        torch.neuron.synchronize()
    for e in prof.function_events:
        assert e.cpu_time_total >= 0, (e.name, e.cpu_time_total)
    (mm,) = [e for e in prof.function_events if e.name == "aten::mm"]
    assert mm.device_time_total > 0
    assert "not enabled" not in capfd.readouterr().err


def test_autograd_profiler_with_kineto_records_device_intervals(mats):
    a, b = mats
    with torch.autograd.profiler.profile(use_device="neuron", use_kineto=True) as prof:
        a @ b
        torch.neuron.synchronize()
    (mm,) = [e for e in prof.function_events
             if e.name == "aten::mm" and e.device_type == DeviceType.CPU]
    assert [k.name for k in mm.kernels] == ["aten::mm"]
    assert mm.device_time_total > 0


# Each cycle's results are read in on_trace_ready: PyTorch's reminder that a
# cycle drops the previous one's events does not apply.
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_schedule_cycles_each_get_their_active_steps(mats):
    a, b = mats
    per_cycle = []

    def ready(prof):
        per_cycle.append(sum(e.name == "aten::mm" for e in device_events(prof)))

    with profile(activities=ACTIVITIES, on_trace_ready=ready,
                 schedule=schedule(wait=1, warmup=1, active=2, repeat=2)) as prof:
        for _ in range(8):
            a @ b
            torch.neuron.synchronize()
            prof.step()
    assert per_cycle == [2, 2]  # warm-up and waiting steps are not recorded
    assert torchneuron._C._profiler_record_count() == 0


def test_compiled_program_steps_are_device_intervals_inside_the_program_range(tmp_path):
    # A compiled graph runs as one task; under the profiler each of its steps
    # is its own device interval (as a CUDA graph's kernels are), and the
    # program is a range around them, so no device time is counted twice.
    def f(x, w):
        return torch.softmax(x @ w, dim=-1).exp().sum(-1)

    x = torch.randn(64, 128, device="neuron")
    w = torch.randn(128, 256, device="neuron")
    compiled = torch.compile(f, backend="neuron")
    warm(lambda: compiled(x, w))
    prof = run_profiled(lambda: [compiled(x, w) for _ in range(2)])
    torch.testing.assert_close(compiled(x, w).cpu(), f(x.cpu(), w.cpu()), rtol=1e-4, atol=1e-4)

    steps = [e for e in device_events(prof) if not e.is_user_annotation]
    names = [e.name for e in steps]
    assert names.count("aten::mm.default") == 2, names
    fused = [n for n in names if n.startswith("fused [64, 256]:")]
    assert fused and all("exp" in n and "sum" in n for n in fused), names
    assert all(e.device_time_total > 0 for e in steps)
    programs = [e for e in device_events(prof) if e.is_user_annotation and e.name.startswith("compiled graph")]
    assert len(programs) == 2, [e.name for e in device_events(prof)]
    for program in programs:
        inside = [e for e in steps if program.time_range.start <= e.time_range.start <= program.time_range.end]
        assert len(inside) == len(steps) // 2
        assert max(e.time_range.end for e in inside) <= program.time_range.end
        assert sum(e.device_time_total for e in inside) <= program.device_time_total * 1.01 + 1
    # The compiled region's device time is its steps' time, counted once.
    (region,) = [r for r in prof.key_averages() if r.key.startswith("Torch-Compiled Region")
                 and r.device_type == DeviceType.CPU]
    assert region.device_time_total == pytest.approx(sum(e.device_time_total for e in steps), rel=0.01)

    events = chrome_trace(prof, tmp_path)
    (first_mm, _) = sorted((e for e in events if e.get("cat") == "kernel" and e["name"] == "aten::mm.default"),
                           key=lambda e: e["ts"])
    ranges = [e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("compiled graph")]
    assert {(e["pid"], e["tid"]) for e in ranges} == {(0, 0)}
    # The launch's flow arrow ends at the program's first step.
    flows = {e["id"]: set() for e in events if e.get("cat") == "ac2g"}
    for e in events:
        if e.get("cat") == "ac2g":
            flows[e["id"]].add((e["ph"], e["ts"]))
    assert any(("f", first_mm["ts"]) in ends and any(ph == "s" for ph, _ in ends) for ends in flows.values())
    # With profiling off, the program records nothing.
    compiled(x, w)
    torch.neuron.synchronize()
    assert torchneuron._C._profiler_record_count() == 0
