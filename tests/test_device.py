"""The `neuron` device itself: autoload, torch.accelerator, torch.neuron's
device functions, configuration through the environment, fork safety."""
import pytest
import torch

# ---- fresh interpreters: autoload, configuration, fork, launch blocking -------
# All started together when the first test that needs one runs (each takes a
# couple of seconds, mostly importing torch), then checked one per test.

_AUTOLOAD = """
    import sys
    import torch
    assert "torchneuron" in sys.modules, "import torch did not autoload torchneuron"
    x = torch.arange(4.0, device="neuron")
    print(torch.accelerator.current_accelerator(), x.device, (x * 2).cpu().tolist())
"""

_NO_AUTOLOAD = """
    import sys
    import torch
    print("torchneuron" in sys.modules, hasattr(torch, "neuron"))
    print(torch._C._get_privateuse1_backend_name())
    print((torch.ones(2) + 1).tolist())
    try:
        torch.ones(1, device="neuron")
    except RuntimeError as e:
        print("unknown device")
"""

_REPORT = """
    import torch
    p = torch.neuron.get_device_properties(0)
    print(torch.neuron.device_count(), torch.accelerator.device_count(), p.total_memory,
          p.memory_capped, torch.neuron.mem_get_info(0)[1])
    last = torch.neuron.device_count() - 1
    x = torch.arange(3.0, device=f"neuron:{last}")
    print((x + 1).cpu().tolist(), x.device)
    print([torch.neuron.get_device_properties(i).physical_index for i in range(last + 1)])
"""

_INVALID = """
    import torch  # must not fail
    print(torch.neuron.is_available(), torch.neuron.device_count())
    print((torch.ones(2) * 3).tolist())
    for use in (lambda: torch.ones(2, device="neuron"),
                lambda: torch.neuron.get_device_properties(0),
                lambda: torch.neuron.memory_allocated()):
        try:
            use()
            print("no error")
        except RuntimeError as e:
            print(type(e).__name__, e)
"""

_FORK = """
    import multiprocessing as mp
    import torch
    import torchneuron

    def child(q):
        try:
            torch.neuron.init()  # raises in a bad fork, as torch.cuda.init() does
            q.put(("ok", (torch.ones(2, device="neuron") + 1).cpu().tolist()))
        except Exception as e:
            q.put((type(e).__name__, str(e)))

    def fork_and_report():
        print(sorted({p for paths in torchneuron.executed_ops().values() for p in paths}))
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        kind, msg = q.get(timeout=30)
        p.join(30)
        print(kind)
        print(msg)
        print(p.exitcode)

    if __name__ == "__main__":
        # the device is in use, but each op ran once: first calls run on this
        # thread, so no worker thread has started yet
        x = torch.ones(2, device="neuron")
        y = (x * 2).cpu()
        fork_and_report()
        # the same op again: queued, which starts the stream's worker thread
        y = (x * 2).cpu()
        torch.neuron.synchronize()
        fork_and_report()
        # the parent is unaffected
        print((torch.arange(3.0, device="neuron") * 2).cpu().tolist())
"""

_LAUNCH_BLOCKING = """
    import torch
    x = torch.randn(5, 3, device="neuron")
    # the first call of the signature runs synchronously anyway; launch
    # blocking is about the next ones, which would otherwise be queued
    torch.index_select(x, 0, torch.tensor([0, 1], device="neuron"))
    bad = torch.tensor([0, 7], device="neuron")
    try:
        torch.index_select(x, 0, bad)
        print("no error at the op")
    except IndexError as e:
        print("at the op:", e)
    torch.neuron.synchronize()  # nothing left to report
    print((x + 1).sum().item() == (x.cpu() + 1).sum().item())
"""

_IS_INITIALIZED = """
    import multiprocessing as mp
    import torch

    def child(q):
        q.put(torch.neuron.is_initialized())

    if __name__ == "__main__":
        print(torch.neuron.is_initialized())
        # queries do not initialize, as with torch.cuda
        torch.neuron.is_available(), torch.neuron.device_count(), torch.neuron.current_device()
        print(torch.neuron.is_initialized())
        x = torch.ones(2, device="neuron")
        print(torch.neuron.is_initialized())
        # queued work starts a worker thread, so a child forked now cannot use the device
        for _ in range(2):
            (x * 2).cpu()
        torch.neuron.synchronize()
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        print(q.get(timeout=30))
        p.join(30)
"""

_CONFIGS = {
    "autoload": (_AUTOLOAD, {}),
    "no_autoload": (_NO_AUTOLOAD, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}),
    "num_cores": (_REPORT, {"NEURON_RT_NUM_CORES": "4", "TORCHNEURON_DEVICE_MEMORY": "512MiB"}),
    "visible_range": (_REPORT, {"NEURON_RT_VISIBLE_CORES": "0-3"}),
    "visible_list_wins": (_REPORT, {"NEURON_RT_VISIBLE_CORES": "0,2",
                                    "NEURON_RT_NUM_CORES": "5"}),
    "bad_num_cores": (_INVALID, {"NEURON_RT_NUM_CORES": "abc"}),
    "bad_visible_cores": (_INVALID, {"NEURON_RT_VISIBLE_CORES": "3-1"}),
    "bad_memory": (_INVALID, {"TORCHNEURON_DEVICE_MEMORY": "lots"}),
    "bad_kernel_threads": (_INVALID, {"TORCHNEURON_KERNEL_THREADS": "zero"}),
    "bad_isa": (_INVALID, {"TORCHNEURON_ISA": "avx3"}),
    "fork": (_FORK, {}),
    "launch_blocking": (_LAUNCH_BLOCKING, {"NEURON_LAUNCH_BLOCKING": "1"}),
    "is_initialized": (_IS_INITIALIZED, {}),
}


@pytest.fixture(scope="module")
def children(start_python):
    return {name: start_python(code, env) for name, (code, env) in _CONFIGS.items()}


@pytest.mark.timeout(150)
def test_import_torch_alone_registers_neuron(children):
    out = children["autoload"].wait(timeout=120).stdout.split()
    assert out == ["neuron", "neuron:0", "[0.0,", "2.0,", "4.0,", "6.0]"]


@pytest.mark.timeout(150)
def test_autoload_disabled_leaves_torch_working(children):
    out = children["no_autoload"].wait(timeout=120).stdout.splitlines()
    assert out == ["False False", "privateuseone", "[2.0, 2.0]", "unknown device"]


def test_explicit_import_is_idempotent():
    import torchneuron

    torchneuron._register()
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.get_device_module("neuron") is torch.neuron


# ---- torch.accelerator and torch.neuron device functions ---------------------


def test_current_accelerator_is_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count()


def test_default_configuration_has_two_cores():
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == 2


@pytest.mark.timeout(150)
def test_is_initialized_once_the_device_is_used(children):
    lines = children["is_initialized"].wait(timeout=120).stdout.splitlines()
    assert lines == ["False", "False", "True", "False"]  # the last from a forked child


def test_device_capability_lists_the_dtypes_tensors_can_hold():
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    assert torch.neuron.get_device_capability("neuron:1") == {"supported_dtypes": dtypes}
    for dtype in dtypes:  # each can be allocated and converted
        t = torch.ones(3, dtype=dtype, device="neuron")
        assert t.to(torch.float32).cpu().tolist() == [1.0, 1.0, 1.0]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool} <= dtypes
    for dtype in (torch.qint8, torch.complex128, torch.float8_e4m3fn, torch.uint16):
        assert dtype not in dtypes
        with pytest.raises(TypeError, match=r"not supported on neuron. Supported"):
            torch.empty(2, dtype=dtype, device="neuron")
    with pytest.raises(RuntimeError, match=r"get_device_capability: device index 5 is out of range"):
        torch.neuron.get_device_capability(5)


@pytest.mark.parametrize("make", [
    lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8).to("neuron"),
    lambda: torch.empty(2, dtype=torch.quint8, device="neuron"),
    lambda: torch.quantize_per_tensor(torch.randn(4, device="neuron"), 0.1, 0, torch.qint8),
], ids=["to", "empty", "quantize_per_tensor"])
def test_quantized_tensors_are_refused_with_a_clear_error(make):
    with pytest.raises(TypeError, match=r"\[neuron\] aten::[\w.]+: (quantized tensors are|dtype \w+ is) "
                                        r"not supported on neuron"):
        make()
    assert (torch.ones(2, device="neuron") + 1).cpu().tolist() == [2.0, 2.0]


def test_set_without_stride_is_contiguous():
    storage = torch.arange(6.0, device="neuron").untyped_storage()
    t = torch.empty(0, device="neuron").set_(storage, 0, (2, 3))
    ref = torch.empty(0).set_(torch.arange(6.0).untyped_storage(), 0, (2, 3))
    assert t.stride() == ref.stride() == (3, 1)
    assert t.cpu().tolist() == ref.tolist()
    t.set_(storage, 2, (2, 2))
    assert t.stride() == (2, 1) and t.cpu().tolist() == [[2.0, 3.0], [4.0, 5.0]]
    with pytest.raises(RuntimeError, match=r"set_: got 2 sizes \[2, 2\] but 1 strides"):
        t.set_(storage, 0, (2, 2), (1,))


def test_current_device_and_set_device(two_cores):
    assert torch.neuron.current_device() == 0
    assert torch.accelerator.current_device_index() == 0
    try:
        torch.neuron.set_device(1)
        assert torch.neuron.current_device() == 1
        assert torch.accelerator.current_device_index() == 1
        assert torch.ones(1, device="neuron").device == torch.device("neuron:1")
        torch.neuron.set_device("neuron:0")
        assert torch.ones(1, device="neuron").device == torch.device("neuron:0")
        torch.neuron.set_device(torch.device("neuron", 1))
        assert torch.neuron.current_device() == 1
    finally:
        torch.neuron.set_device(0)


def test_device_context_managers(two_cores):
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device.index == 1
        with torch.neuron.device("neuron:0"):
            assert torch.neuron.current_device() == 0
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0
    with torch.accelerator.device_index(1):
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0
    x = torch.ones(1, device="neuron:1")
    with torch.neuron.device_of(x):
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(None):  # no-op, like torch.cuda.device(None)
        assert torch.neuron.current_device() == 0


def test_device_context_restores_after_exception(two_cores):
    with pytest.raises(ZeroDivisionError):
        with torch.neuron.device(1):
            1 / 0
    assert torch.neuron.current_device() == 0


def test_device_properties():
    props = torch.neuron.get_device_properties(0)
    assert props.name == "NeuronCore-v3 (software)"
    assert torch.neuron.get_device_name() == "NeuronCore-v3 (software)"
    assert torch.neuron.get_device_name("neuron:0") == props.name
    assert props.total_memory > 0
    assert props.core_count == torch.neuron.device_count()
    free, total = torch.neuron.mem_get_info(0)
    assert total == props.total_memory
    assert 0 <= free <= total
    assert "NeuronCore-v3" in repr(props)


def test_tensor_and_module_methods(two_cores):
    t = torch.arange(3.0)
    n = t.neuron()
    assert n.is_neuron and not t.is_neuron
    assert n.device == torch.device("neuron:0")
    assert t.neuron(1).device == torch.device("neuron:1")
    assert torch.equal(n.cpu(), t)
    m = torch.nn.Linear(3, 2).neuron()
    assert all(p.is_neuron for p in m.parameters())
    assert m(n).is_neuron
    assert t.untyped_storage().neuron().device.type == "neuron"


@pytest.mark.parametrize("call", [
    lambda: torch.neuron.set_device(2),
    lambda: torch.neuron.set_device(-1),
    lambda: torch.neuron.get_device_properties(7),
    lambda: torch.neuron.synchronize(5),
    lambda: torch.neuron.memory_allocated(3),
    lambda: torch.neuron.Stream(device=4),
    lambda: torch.neuron.get_rng_state(9),
], ids=["set_device", "set_device_negative", "get_device_properties", "synchronize",
        "memory_allocated", "Stream", "get_rng_state"])
def test_out_of_range_index_in_device_module(call):
    with pytest.raises(RuntimeError, match=r"\[neuron\] \w+: device index -?\d+ is out of range.*"
                                         r"2 neuron core\(s\) \(neuron:0 to neuron:1\)"):
        call()
    assert torch.neuron.current_device() == 0


def test_out_of_range_context_manager_leaves_current_device():
    with pytest.raises(RuntimeError, match=r"\[neuron\] device: device index 5 is out of range"):
        with torch.neuron.device(5):
            pass
    assert torch.neuron.current_device() == 0


@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, device="neuron:2"),
    lambda: torch.empty(2, device="neuron:9"),
    lambda: torch.ones(2).to("neuron:2"),
    lambda: torch.ones(2).neuron(3),
    lambda: torch.accelerator.set_device_index(2),
    lambda: torch.accelerator.memory_allocated(4),
], ids=["ones", "empty", "to", "tensor.neuron", "accelerator.set_device_index",
        "accelerator.memory_allocated"])
def test_out_of_range_index_in_torch(make):
    with pytest.raises(RuntimeError, match=r"\[neuron\] \w+: device index \d is out of range; "
                                         r"this process has 2 neuron core\(s\)"):
        make()
    assert torch.neuron.current_device() == 0


def test_wrong_device_type_for_device_module():
    with pytest.raises(ValueError, match=r"expected a neuron device, got 'cpu'"):
        torch.neuron.set_device("cpu")
    with pytest.raises(TypeError, match=r"expected a device index, name or torch.device"):
        torch.neuron.set_device(1.5)


def test_synchronize_all_forms(two_cores):
    x = torch.randn(64, 64, device="neuron:1")
    y = x @ x
    torch.neuron.synchronize()
    torch.neuron.synchronize(1)
    torch.neuron.synchronize("neuron:1")
    torch.accelerator.synchronize(1)
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())


# ---- configuration through the environment (each in a fresh process) --------


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name,physical", [
    ("num_cores", [0, 1, 2, 3]), ("visible_range", [0, 1, 2, 3]), ("visible_list_wins", [0, 2])])
def test_core_count_from_environment(children, name, physical):
    lines = children[name].wait(timeout=120).stdout.splitlines()
    count = len(physical)
    n, acc_n, *_ = lines[0].split()
    assert (int(n), int(acc_n)) == (count, count)
    assert lines[1] == f"[1.0, 2.0, 3.0] neuron:{count - 1}"
    assert lines[2] == str(physical)  # neuron:i is the i-th visible core


@pytest.mark.timeout(150)
def test_device_memory_from_environment(children):
    # the num_cores child also sets TORCHNEURON_DEVICE_MEMORY=512MiB
    lines = children["num_cores"].wait(timeout=120).stdout.splitlines()
    assert lines[0].split() == ["4", "4", str(512 << 20), "False", str(512 << 20)]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name,var,value,accepted", [
    ("bad_num_cores", "NEURON_RT_NUM_CORES", "abc", "whole number of cores"),
    ("bad_visible_cores", "NEURON_RT_VISIBLE_CORES", "3-1", "descending"),
    ("bad_memory", "TORCHNEURON_DEVICE_MEMORY", "lots", "'512MiB'"),
    ("bad_kernel_threads", "TORCHNEURON_KERNEL_THREADS", "zero", "1 to 256"),
    ("bad_isa", "TORCHNEURON_ISA", "avx3", "baseline, avx2, avx512, avx512_bf16"),
])
def test_invalid_configuration_is_a_clear_error(children, name, var, value, accepted):
    lines = children[name].wait(timeout=120).stdout.splitlines()
    assert lines[:2] == ["False 0", "[3.0, 3.0]"]
    assert len(lines) == 5
    for line in lines[2:]:
        assert line.startswith("RuntimeError [neuron]"), line
        assert f"{var}='{value}' is invalid" in line, line
        assert accepted in line, line


# ---- fork safety and launch blocking ----------------------------------------


@pytest.mark.timeout(150)
def test_fork_before_any_queued_work_is_fine(children):
    lines = children["fork"].wait(timeout=120).stdout.splitlines()
    paths, kind, msg, exitcode = lines[:4]
    assert "'queue'" not in paths, paths  # the parent ran first calls only
    assert (kind, msg, exitcode) == ("ok", "[2.0, 2.0]", "0")


@pytest.mark.timeout(150)
def test_forked_child_gets_clear_error(children):
    lines = children["fork"].wait(timeout=120).stdout.splitlines()
    paths, kind, msg, exitcode, parent = lines[4:]
    assert "'queue'" in paths, paths  # the parent had queued work
    assert kind == "RuntimeError"
    assert "fork" in msg and "'spawn'" in msg, msg
    assert "neuron runtime was started before fork()" in msg, msg  # from init(), not the op
    assert exitcode == "0"
    assert parent == "[0.0, 2.0, 4.0]"


@pytest.mark.timeout(150)
def test_launch_blocking_reports_error_at_the_op(children):
    first, second = children["launch_blocking"].wait(timeout=120).stdout.splitlines()
    assert first.startswith("at the op:") and "aten::index_select" in first, first
    assert second == "True"
