"""Streams: torch.neuron.Stream / torch.Stream on neuron, current and default
streams, ordering between streams, and errors raised by queued work."""
import pytest
import torch
import torch.nn.functional as F
import torchneuron

# queued work and synchronization: a deadlock must fail, not hang the run
pytestmark = pytest.mark.timeout(60)


def test_stream_objects(two_cores):
    s = torch.neuron.Stream()
    assert isinstance(s, torch.Stream)
    assert s.device == torch.device("neuron:0")
    assert s.stream_id != 0  # 0 is the default stream
    t = torch.Stream(device="neuron")
    assert t.device == torch.device("neuron:0")
    assert torch.neuron.Stream(device=1).device == torch.device("neuron:1")
    assert torch.neuron.Stream(device="neuron:1").device_index == 1
    assert torch.Stream(device="neuron:1").device_index == 1
    assert torch.neuron.Stream(priority=-1).device_index == 0


def test_default_and_current_stream(two_cores):
    d = torch.neuron.default_stream()
    assert d.stream_id == 0 and d.device_index == 0
    assert torch.neuron.current_stream() == d
    assert torch.accelerator.current_stream() == d
    assert torch.neuron.default_stream(1).device_index == 1
    assert torch.neuron.current_stream(1) == torch.neuron.default_stream(1)
    assert torch.neuron.current_stream("neuron:1").device_index == 1


def test_stream_context_manager():
    s = torch.neuron.Stream()
    with torch.neuron.stream(s) as entered:
        assert entered == s
        assert torch.neuron.current_stream() == s
        assert torch.accelerator.current_stream() == s
        x = torch.arange(10.0, device="neuron") * 3
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    with torch.Stream(device="neuron") as t:  # torch.Stream is a context manager too
        assert torch.neuron.current_stream() == t
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    with torch.neuron.stream(None):
        assert torch.neuron.current_stream() == torch.neuron.default_stream()
    s.synchronize()
    assert torch.equal(x.cpu(), torch.arange(10.0) * 3)


def test_set_stream():
    s = torch.neuron.Stream()
    try:
        torch.neuron.set_stream(s)
        assert torch.neuron.current_stream() == s
        torch.neuron.set_stream(None)  # no-op, like torch.cuda.set_stream(None)
        assert torch.neuron.current_stream() == s
        torch.accelerator.set_stream(torch.neuron.default_stream())
        assert torch.neuron.current_stream() == torch.neuron.default_stream()
    finally:
        torch.neuron.set_stream(torch.neuron.default_stream())


@pytest.mark.parametrize("enter", [torch.neuron.stream, lambda s: s],
                         ids=["neuron.stream", "Stream"])
def test_stream_context_on_other_core(two_cores, enter):
    # Like CUDA: a stream's device is current inside the block, and both the
    # device and the streams are restored after it.
    s1 = torch.neuron.Stream(device=1)
    with enter(s1):
        assert torch.neuron.current_device() == 1
        assert torch.neuron.current_stream(1) == s1
        assert torch.neuron.current_stream(0) == torch.neuron.default_stream(0)
        x = torch.ones(4, device="neuron") + 1
    assert torch.neuron.current_device() == 0
    assert torch.neuron.current_stream(1) == torch.neuron.default_stream(1)
    s1.synchronize()
    assert x.device == torch.device("neuron:1")
    assert torch.equal(x.cpu(), torch.full((4,), 2.0))


def test_current_stream_and_device_are_per_thread(two_cores):
    import threading

    seen = {}

    def other_thread():
        seen["stream"] = torch.neuron.current_stream() == torch.neuron.default_stream()
        seen["device"] = torch.neuron.current_device()
        seen["value"] = (torch.arange(4.0, device="neuron") * 2).cpu()

    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        with torch.neuron.device(1):
            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
    assert seen["stream"] and seen["device"] == 0
    assert torch.equal(seen["value"], torch.arange(4.0) * 2)


def test_stream_query_and_synchronize():
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        x = torch.randn(128, 128, device="neuron")
        for _ in range(4):
            x = torch.tanh(x @ x)
    s.synchronize()
    assert s.query()
    ref = x.cpu()
    torch.testing.assert_close(x.cpu(), ref)


def test_ordering_with_wait_stream():
    producer, consumer = torch.neuron.Stream(), torch.neuron.Stream()
    a = torch.randn(200, 200)
    with torch.neuron.stream(producer):
        x = a.to("neuron")
        for _ in range(3):
            x = torch.sin(x @ x.t() / 200)
    consumer.wait_stream(producer)
    with torch.neuron.stream(consumer):
        y = x * 2 + 1
    consumer.synchronize()
    ref = a
    for _ in range(3):
        ref = torch.sin(ref @ ref.t() / 200)
    torch.testing.assert_close(y.cpu(), ref * 2 + 1)


def test_record_stream():
    side = torch.neuron.Stream()
    a = torch.randn(256, 256)
    x = a.to("neuron")
    x @ x  # the first call of the signature may run synchronously; the next is queued
    # queued as the fallback's task or as one of the device's kernels (oneDNN's float32 GEMM)
    queued = sum(torchneuron.executed_ops()["aten::mm"].get(path, 0) for path in ("queue", "kernel"))
    side.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(side):
        y = x @ x
    assert sum(torchneuron.executed_ops()["aten::mm"].get(path, 0) for path in ("queue", "kernel")) == queued + 1
    x.record_stream(side)  # x's block may not be reused before side's work is done
    del x
    z = torch.zeros(256, 256, device="neuron")  # must not overwrite x under side's matmul
    side.synchronize()
    # against the same product on the device again (its float32 GEMM may sum in another order than CPU's)
    torch.testing.assert_close(y.cpu(), (a.to("neuron") @ a.to("neuron")).cpu())
    torch.testing.assert_close(y.cpu(), a @ a, rtol=1e-4, atol=1e-4)
    assert z.abs().sum().item() == 0


def test_cross_core_copy_is_ordered(two_cores):
    a = torch.randn(300, 300)
    x = a.to("neuron:0")
    for _ in range(3):
        x = x @ x.t() / 300
    y = x.to("neuron:1") + 1  # must see x's final value
    ref = a
    for _ in range(3):
        ref = ref @ ref.t() / 300
    torch.testing.assert_close(y.cpu(), ref + 1)
    assert y.device == torch.device("neuron:1")


def test_synchronize_all_streams_of_a_device():
    streams = [torch.neuron.Stream() for _ in range(3)]
    outs = []
    for i, s in enumerate(streams):
        with torch.neuron.stream(s):
            full = torch.full((64, 64), float(i), device="neuron")
            outs.append(full @ torch.eye(64, device="neuron"))
    torch.neuron.synchronize()
    assert all(s.query() for s in streams)
    for i, o in enumerate(outs):
        assert torch.equal(o.cpu(), torch.full((64, 64), float(i)))


# ---- errors raised by queued work --------------------------------------------
# The first call of each argument signature runs synchronously, so even an
# out-of-range index is raised at that call. Later calls of the same signature
# are queued: the bad index is only read when the CPU kernel runs on the
# stream's worker thread, so the op returns without error and the failure
# surfaces at the next synchronization (or enqueue) on that stream. Each test
# therefore runs the signature with valid indices first.


def _index_select(i, device="neuron"):
    x = torch.randn(5, 3, device=device)
    return torch.index_select(x, 0, torch.tensor([0, i], device=device))


def _gather(i, device="neuron"):
    x = torch.randn(5, 3, device=device)
    return torch.gather(x, 0, torch.tensor([[0, i, 1]], device=device))


def _embedding(i, device="neuron"):
    w = torch.randn(4, 2, device=device)
    return F.embedding(torch.tensor([1, i], device=device), w)


# call(index, device), a valid and a bad index, the op that fails, its error
BAD_INDEX = {
    "index_select": (_index_select, 4, 7, "aten::index_select", IndexError),
    "gather": (_gather, 4, 9, "aten::gather", RuntimeError),
    "embedding": (_embedding, 3, 4, "aten::index_select", IndexError),
}


def _queue_bad_index(name="index_select", device="neuron"):
    """The op with a bad index, queued: after a call with a valid index (the
    synchronous first call of the signature). Returns the bad call's result."""
    call, good, bad, _, _ = BAD_INDEX[name]
    call(good, device)
    torch.neuron.synchronize(device)
    return call(bad, device)


def first_calls_with_bad_indices():
    """Run by a fresh interpreter (in_fresh_process), where every signature is
    new: each op's first call, with a bad index."""
    report = {}
    for name, (call, _, bad, _, _) in BAD_INDEX.items():
        at_call = later = None
        try:
            call(bad)
        except Exception as e:
            at_call = [type(e).__name__, str(e)]
        try:
            torch.neuron.synchronize()
        except Exception as e:
            later = [type(e).__name__, str(e)]
        report[name] = [at_call, later]
    return report


@pytest.mark.timeout(150)
@pytest.mark.parametrize("name", sorted(BAD_INDEX))
def test_first_call_with_bad_index_raises_at_the_op(in_fresh_process, name):
    call, _, bad, op, exc = BAD_INDEX[name]
    with pytest.raises(exc) as cpu_info:
        call(bad, "cpu")
    at_call, later = in_fresh_process("first_calls_with_bad_indices")[name]
    assert at_call == [exc.__name__, f"[neuron] {op}: {cpu_info.value}"], at_call
    assert later is None


@pytest.mark.parametrize("name", sorted(BAD_INDEX))
@pytest.mark.parametrize("sync", ["synchronize", "item", "cpu", "stream"])
def test_error_in_queued_work_surfaces_at_next_sync(name, sync):
    _, _, _, op, exc = BAD_INDEX[name]
    y = _queue_bad_index(name)  # enqueued: the bad index has not been read yet
    assert y.device.type == "neuron"
    points = {
        "synchronize": lambda: torch.neuron.synchronize(),
        "item": lambda: y.sum().item(),
        "cpu": lambda: y.cpu(),
        "stream": lambda: torch.neuron.current_stream().synchronize(),
    }
    with pytest.raises(exc) as info:
        points[sync]()
    msg = str(info.value)
    assert f"raised by queued op {op}" in msg, msg
    assert "out of" in msg, msg  # PyTorch's own message is kept
    # reported once; then the device keeps working
    torch.neuron.synchronize()
    x = torch.randn(5, 3)
    torch.testing.assert_close(
        torch.index_select(x.to("neuron"), 0, torch.tensor([4, 0], device="neuron")).cpu(),
        torch.index_select(x, 0, torch.tensor([4, 0])))


def test_error_in_queued_work_surfaces_when_printing():
    y = _queue_bad_index()
    with pytest.raises(IndexError, match=r"index out of range.*raised by queued op "
                                         r"aten::index_select"):
        str(y)


def test_error_on_side_stream_surfaces_on_that_stream():
    s = torch.neuron.Stream()
    _index_select(4)  # the first call of the signature, on the default stream
    with torch.neuron.stream(s):
        _index_select(7)  # queued on s
    # the default stream has nothing to report
    torch.neuron.default_stream().synchronize()
    with pytest.raises(IndexError, match="raised by queued op aten::index_select"):
        s.synchronize()
    s.synchronize()


def test_error_surfaces_at_next_sync_path_op_naming_the_failed_op():
    a = torch.tensor([1.0, 0.0, 2.0], device="neuron")
    _queue_bad_index()
    # nonzero has a data-dependent shape: it synchronizes first, and the
    # pending error must still name the op that failed, not nonzero.
    with pytest.raises(IndexError) as info:
        torch.nonzero(a)
    msg = str(info.value)
    assert "raised by queued op aten::index_select" in msg, msg
    assert "aten::nonzero" not in msg, msg


def test_error_in_queued_work_on_other_core(two_cores):
    x = torch.randn(5, 3, device="neuron:1")
    torch.index_select(x, 0, torch.tensor([2], device="neuron:1"))  # the first call
    torch.neuron.synchronize(1)
    torch.index_select(x, 0, torch.tensor([9], device="neuron:1"))
    torch.neuron.synchronize(0)  # other core: nothing to report
    with pytest.raises(IndexError, match="raised by queued op aten::index_select"):
        torch.neuron.synchronize(1)
    assert torch.equal((x + 0).cpu(), x.cpu())


# ---- waiting for queued work while holding the GIL ----------------------------

_GIL_WAIT = """
    import faulthandler
    import torch
    # The first random draw on the device imports Dynamo (torch._refs): seconds
    # on a busy machine, before the watchdog starts.
    torch.randn(2, device="neuron").cpu()
    faulthandler.dump_traceback_later(30, exit=True)  # a deadlock ends the process
    a = torch.randn(256, 256, device="neuron")
    a = a @ a  # the first call of the signature runs synchronously
    for _ in range(20):
        a = a @ a / 256  # queued: the stream stays busy for a while
    src = torch.arange(4.0).pin_memory()
    x = src.to("neuron", non_blocking=True)  # queued; the copy task holds a reference to src
    x[2] = 100.0  # a Python scalar: the first fill_ of a 0-dim neuron tensor waits for the stream
    faulthandler.cancel_dump_traceback_later()
    print(x.cpu().tolist())
"""


@pytest.fixture(scope="module", autouse=True)
def gil_wait_child(in_fresh_process, start_python):
    """The child processes of this module, started with its first test so that
    they run meanwhile."""
    in_fresh_process.start("first_calls_with_bad_indices")
    return start_python(_GIL_WAIT)


# A synchronous first call waits for the stream. Its caller may hold the GIL
# (Tensor.__setitem__ turns a Python scalar into a 0-dim neuron tensor,
# scalar_tensor -> fill_, while holding it), and a queued task that holds a
# tensor with a Python object (here the pinned source of a non_blocking copy)
# needs the GIL to drop it when the worker thread is done with the task: the
# wait must release the GIL, or the two threads wait for each other forever.
@pytest.mark.timeout(150)
def test_first_call_holding_the_gil_does_not_deadlock(gil_wait_child):
    done = gil_wait_child.wait(timeout=120, ok=False)
    assert done.returncode == 0 and done.stdout == "[0.0, 1.0, 100.0, 3.0]\n", (
        f"exit code {done.returncode}\n--- stderr\n{done.stderr[-3000:]}")
