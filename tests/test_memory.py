"""Device memory: the caching allocator's statistics through torch.neuron and
torch.accelerator, the capacity limit and out-of-memory errors, pinned host
memory."""
import gc

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile
from torch.utils.data import DataLoader, TensorDataset

MiB = 1 << 20


def _settle(device=0):
    gc.collect()
    torch.neuron.synchronize(device)


# ---- statistics --------------------------------------------------------------


def test_memory_functions_agree_with_torch_accelerator():
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="neuron")
    _settle()
    stats = torch.neuron.memory_stats()
    assert stats == torch.accelerator.memory_stats(0)
    assert torch.neuron.memory_allocated() == torch.accelerator.memory_allocated(0) \
        == stats["allocated_bytes.all.current"]
    assert torch.neuron.memory_reserved() == torch.accelerator.memory_reserved(0) \
        == stats["reserved_bytes.all.current"]
    assert torch.neuron.max_memory_allocated() == torch.accelerator.max_memory_allocated(0) \
        == stats["allocated_bytes.all.peak"]
    assert torch.neuron.max_memory_reserved() == torch.accelerator.max_memory_reserved(0) \
        == stats["reserved_bytes.all.peak"]
    assert torch.neuron.mem_get_info() == torch.accelerator.get_memory_info(0)
    assert torch.neuron.memory_allocated("neuron:0") == torch.neuron.memory_allocated(0)
    del x


def test_allocation_shows_up_and_frees():
    _settle()
    base_alloc = torch.neuron.memory_allocated()
    base_count = torch.neuron.memory_stats()["allocation.all.current"]
    x = torch.empty(4 * MiB, dtype=torch.uint8, device="neuron")
    assert torch.neuron.memory_allocated() == base_alloc + 4 * MiB
    assert torch.neuron.memory_stats()["allocation.all.current"] == base_count + 1
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    free_before_del = torch.neuron.mem_get_info()[0]
    del x
    _settle()
    assert torch.neuron.memory_allocated() == base_alloc
    assert torch.neuron.memory_stats()["allocation.all.current"] == base_count
    # freed memory stays cached: reserved, not free, until empty_cache
    assert torch.neuron.memory_reserved() >= 4 * MiB
    assert torch.neuron.mem_get_info()[0] == free_before_del
    torch.neuron.empty_cache()
    assert torch.neuron.mem_get_info()[0] >= free_before_del + 4 * MiB
    assert torch.neuron.memory_reserved() <= torch.neuron.mem_get_info()[1]


def _keep_stream_busy(stream=None):
    """Queues a few large matmuls (tens of ms) on `stream` (default: current)."""
    with torch.neuron.stream(stream or torch.neuron.current_stream()):
        x = torch.randn(1024, 1024, device="neuron") / 32
        x @ x  # the first call of a signature may run synchronously
        busy = x
        for _ in range(6):
            busy = busy @ x
    return busy


def test_a_block_freed_under_queued_work_is_reused_after_it():
    # As with CUDA's allocator: a block the host frees while queued work still
    # reads it goes back to its stream's pool at once; later work of that
    # stream, which runs after the reader, may take it.
    torch.full((1 << 16,), 1.0, device="neuron") * 2  # first calls may run synchronously
    _settle()
    _keep_stream_busy()
    a = torch.full((1 << 16,), 1.0, device="neuron")
    b = a * 2  # queued: reads a
    ptr = a.data_ptr()
    del a
    c = torch.full((1 << 16,), 5.0, device="neuron")
    pending = not torch.neuron.current_stream().query()
    reused = c.data_ptr() == ptr
    torch.neuron.synchronize()
    assert pending, "the stream ran dry before the block was freed: nothing was tested"
    assert reused
    assert torch.equal(b.cpu(), torch.full((1 << 16,), 2.0))
    assert torch.equal(c.cpu(), torch.full((1 << 16,), 5.0))


def test_a_host_far_ahead_of_its_queue_reuses_what_it_frees():
    # Memory held by queued work alone must not pile up: 200 iterations of
    # 1 MiB temporaries would otherwise take hundreds of MiB of new segments.
    x = torch.ones(MiB // 4, device="neuron")
    x * 2 + 1  # first calls may run synchronously
    _settle()
    _keep_stream_busy()
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_reserved()
    for _ in range(200):
        y = x * 2 + 1
    grown = torch.neuron.max_memory_reserved() - base
    pending = not torch.neuron.current_stream().query()
    torch.neuron.synchronize()
    assert pending, "the stream ran dry before the loop ended: nothing was tested"
    assert grown <= 8 * MiB, f"reserved memory grew by {grown / MiB:.0f} MiB"
    assert torch.equal(y.cpu(), torch.full((MiB // 4,), 3.0))


def test_memory_read_by_another_streams_queued_work_waits_for_it():
    # No record_stream call (CUDA would need one): a block used by queued work
    # of another stream is reused only once that work ran.
    side = torch.neuron.Stream()
    torch.full((1 << 16,), 1.0, device="neuron") * 2  # first calls may run synchronously
    a = torch.full((1 << 16,), 1.0, device="neuron")
    side.wait_stream(torch.neuron.current_stream())
    _keep_stream_busy(side)
    with torch.neuron.stream(side):
        b = a * 2
    del a
    c = torch.full((1 << 16,), 5.0, device="neuron")  # the default stream is idle: runs now
    torch.neuron.current_stream().synchronize()
    pending = not side.query()
    side.synchronize()
    assert pending, "the side stream ran dry before the block was freed: nothing was tested"
    assert torch.equal(b.cpu(), torch.full((1 << 16,), 2.0))
    assert torch.equal(c.cpu(), torch.full((1 << 16,), 5.0))


def test_results_of_ops_are_counted():
    _settle()
    base = torch.neuron.memory_allocated()
    a = torch.ones(256, 256, device="neuron")  # 256 KiB
    b = a @ a
    assert torch.neuron.memory_allocated() == base + 2 * 256 * 256 * 4
    del a, b
    _settle()
    assert torch.neuron.memory_allocated() == base


def test_peak_and_reset():
    _settle()
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    assert torch.neuron.max_memory_allocated() == base
    x = torch.empty(6 * MiB, dtype=torch.uint8, device="neuron")
    del x
    _settle()
    assert torch.neuron.max_memory_allocated() == base + 6 * MiB
    assert torch.neuron.memory_allocated() == base
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == base
    torch.accelerator.reset_peak_memory_stats(0)
    assert torch.accelerator.max_memory_allocated(0) == base


def test_accumulated_stats_and_reset():
    _settle()
    torch.neuron.reset_accumulated_memory_stats()
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == 0
    assert stats["allocated_bytes.all.freed"] == 0
    x = torch.empty(MiB, dtype=torch.uint8, device="neuron")
    del x
    _settle()
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.allocated"] == MiB
    assert stats["allocated_bytes.all.freed"] == MiB
    assert stats["allocation.all.allocated"] == 1


def test_stats_are_per_device(two_cores):
    _settle(0)
    _settle(1)
    before0, before1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="neuron:1")
    assert torch.neuron.memory_allocated(1) == before1 + 2 * MiB
    assert torch.neuron.memory_allocated(0) == before0
    with torch.neuron.device(1):  # the default is the current device
        assert torch.neuron.memory_allocated() == before1 + 2 * MiB
        assert torch.neuron.memory_stats()["allocated_bytes.all.current"] == before1 + 2 * MiB
    del x


def test_pool_stats_add_up():
    small = torch.empty(1000, device="neuron")  # <= 1 MiB: small pool
    large = torch.empty(4 * MiB, dtype=torch.uint8, device="neuron")  # large pool
    stats = torch.neuron.memory_stats()
    for key in ("allocated_bytes", "reserved_bytes", "allocation", "segment"):
        total = stats[f"{key}.all.current"]
        assert stats[f"{key}.small_pool.current"] > 0, key
        assert stats[f"{key}.large_pool.current"] > 0, key
        assert stats[f"{key}.small_pool.current"] + stats[f"{key}.large_pool.current"] == total
    del small, large


def test_memory_summary_and_snapshot():
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="neuron")
    text = torch.neuron.memory_summary()
    assert "neuron:0 memory summary" in text
    assert "NeuronCore-v3 (software)" in text
    assert "Allocated memory" in text and "Reserved memory" in text
    assert "Out-of-memory errors" in text
    assert len(torch.neuron.memory_summary(abbreviated=True)) < len(text)
    snap = torch.neuron.memory_snapshot()
    assert sum(s["allocated_size"] for s in snap) == torch.neuron.memory_allocated()
    assert sum(s["total_size"] for s in snap) == torch.neuron.memory_reserved()
    assert {s["segment_type"] for s in snap} <= {"small", "large"}
    del x


def test_empty_cache_through_torch_accelerator():
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="neuron")
    del x
    _settle()
    torch.accelerator.empty_cache()
    assert torch.neuron.memory_reserved() - torch.neuron.memory_allocated() < 3 * MiB


# ---- out of memory in this process (requests far beyond any capacity) -------

TiB = 1 << 40


@pytest.mark.parametrize("make", [
    lambda: torch.empty(TiB, dtype=torch.uint8, device="neuron"),
    lambda: torch.ones(1, device="neuron").expand(TiB // 4).contiguous(),
    lambda: torch.ones(1, device="neuron").repeat(TiB // 4),
], ids=["empty", "contiguous", "repeat"])
def test_out_of_memory_error(make):
    capacity = torch.neuron.mem_get_info()[1]
    ooms = torch.neuron.memory_stats()["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        make()
    msg = str(info.value)
    assert msg.startswith("[neuron]"), msg
    assert f"neuron:0 out of memory: tried to allocate 1.00 TiB ({TiB} bytes)" in msg, msg
    assert f"capacity {capacity / (1 << 30):.2f} GiB" in msg, msg
    assert "allocated by tensors" in msg and "reserved by the cache" in msg, msg
    assert torch.neuron.memory_stats()["num_ooms"] == ooms + 1
    # nothing leaked, the device keeps working
    x = torch.randn(100, 100)
    torch.testing.assert_close((x.to("neuron") @ x.to("neuron")).cpu(), x @ x)


# ---- capacity limit and out of memory (in a child with 64 MiB per core) ------

_OOM = """
    import torch
    MiB = 1 << 20
    print(torch.neuron.mem_get_info(0)[1])
    keep = torch.empty(40 * MiB, dtype=torch.uint8, device="neuron")
    try:
        torch.empty(40 * MiB, dtype=torch.uint8, device="neuron")
        print("no error")
    except torch.OutOfMemoryError as e:
        print("OOM", e)
    y = torch.ones(4 * MiB, device="neuron")  # 16 MiB
    try:  # an op's output that does not fit
        y + 1
        print("no error")
    except torch.OutOfMemoryError as e:
        print("OOM", e)
    try:  # a host-to-device copy that does not fit
        torch.ones(100 * MiB, dtype=torch.uint8).to("neuron")
        print("no error")
    except torch.OutOfMemoryError as e:
        print("OOM", e)
    print(torch.neuron.memory_stats()["num_ooms"])
    # the other core has its own capacity
    other = torch.empty(40 * MiB, dtype=torch.uint8, device="neuron:1")
    del keep, other, y
    # 56 MiB are now cached but unused: a request that only fits once the cache
    # is released succeeds, counted as an allocation retry
    retries = torch.neuron.memory_stats()["num_alloc_retries"]
    again = torch.empty(50 * MiB, dtype=torch.uint8, device="neuron")
    print(torch.neuron.memory_stats()["num_alloc_retries"] - retries)
    x = torch.arange(1000.0, device="neuron")
    print((x * 2).sum().item() == (torch.arange(1000.0) * 2).sum().item())
    print(torch.neuron.memory_stats()["num_ooms"])
"""


# An op's output that does not fit names the op: on the first call of its
# argument signature (which allocates the device outputs before running the
# CPU kernel) and on a later, queued call. Sizes just above the capacity: an
# op that ran the CPU kernel first would make its host output just as big.
_OOM_IN_OP = """
    import torch
    import torchneuron
    MiB = 1 << 20

    def report(call):
        try:
            call()
            print("no error")
        except torch.OutOfMemoryError as e:
            print("OOM", e)

    report(lambda: torch.ones(1, device="neuron").expand(1 << 25) + 1)  # 128 MiB
    x = torch.ones(1, device="neuron").expand(4 * MiB)
    for _ in range(2):
        (x + 1).sum().item()  # 16 MiB: fits
    print(sorted(torchneuron.executed_ops()["aten::add.Tensor"].items()))
    keep = torch.empty(50 * MiB, dtype=torch.uint8, device="neuron")
    report(lambda: x + 1)  # a known signature: queued, if it fitted
    print(torch.neuron.memory_stats()["num_ooms"])
    del keep
    print(torch.equal((x[:3] + 1).cpu(), torch.full((3,), 2.0)))
"""


@pytest.fixture(scope="module")
def oom_child(start_python):
    return start_python(_OOM, {"TORCHNEURON_DEVICE_MEMORY": "64MiB"})


@pytest.fixture(scope="module")
def oom_in_op_child(start_python):
    return start_python(_OOM_IN_OP, {"TORCHNEURON_DEVICE_MEMORY": "64MiB"})


@pytest.mark.timeout(150)
def test_out_of_memory_in_an_op_names_the_op(oom_child, oom_in_op_child):  # both start now
    first, paths, queued, ooms, works = oom_in_op_child.wait(timeout=120).stdout.splitlines()
    for line, req in ((first, 128 * MiB), (queued, 16 * MiB)):
        assert line.startswith("OOM [neuron] aten::add.Tensor: neuron:0 out of memory: "
                               f"tried to allocate {req // MiB}.00 MiB ({req} bytes)"), line
        assert "capacity 64.00 MiB" in line, line
        assert "allocated by tensors" in line and "reserved by the cache" in line, line
    assert paths == "[('queue', 1), ('sync', 1)]", paths  # the first call, then queued
    assert ooms == "2"
    assert works == "True"


@pytest.mark.timeout(150)
def test_out_of_memory_is_clear_and_recoverable(oom_child):
    lines = oom_child.wait(timeout=120).stdout.splitlines()
    assert lines[0] == str(64 * MiB)
    expected = [(40 * MiB, "40.00"), (16 * MiB, "56.00"), (100 * MiB, "56.00")]
    for line, (req, allocated) in zip(lines[1:4], expected):
        assert line.startswith("OOM [neuron]"), line
        assert "neuron:0 out of memory" in line, line
        assert f"({req} bytes)" in line, line
        assert "capacity 64.00 MiB" in line, line
        assert f"{allocated} MiB allocated" in line, line
        assert "reserved by the cache" in line and "cached but unused" in line, line
    assert lines[4] == "3"  # num_ooms
    assert lines[5] == "1"  # the cache was released once for the 50 MiB request
    assert lines[6] == "True"  # and the device computes correctly
    assert lines[7] == "3"


# ---- pinned host memory ------------------------------------------------------


def test_pin_memory():
    x = torch.randn(16)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and torch.equal(p, x)
    assert torch.empty(4, pin_memory=True).is_pinned()
    assert not torch.empty(4, device="neuron").is_pinned()
    assert p.pin_memory() is p  # already pinned


def test_pinning_a_neuron_tensor_is_refused():
    with pytest.raises(RuntimeError, match="cannot pin 'neuronFloatType' only dense CPU tensors "
                                           "can be pinned"):
        torch.ones(2, device="neuron").pin_memory()


@pytest.mark.parametrize("make", [
    lambda: torch.empty(2, device="neuron", pin_memory=True),
    lambda: torch.empty_strided((2,), (1,), device="neuron", pin_memory=True),
    lambda: torch.zeros(2, device="neuron", pin_memory=True),
], ids=["empty", "empty_strided", "zeros"])
def test_pinned_neuron_factory_is_refused(make):
    # zeros() makes its tensor with empty()
    with pytest.raises(RuntimeError, match=r"^\[neuron\] (empty|empty_strided): only dense CPU "
                                           r"tensors can be pinned; pin_memory=True makes no "
                                           r"sense for a neuron tensor"):
        make()


# ---- copies from pageable host memory ---------------------------------------


def _queued_host_copies(fn):
    """fn's result and the host-to-device copies it queued on the device."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        result = fn()
        torch.neuron.synchronize()
    return result, [e for e in prof.events()
                    if e.device_type == DeviceType.PrivateUse1 and e.name == "aten::copy_ (host to neuron)"]


def test_a_copy_to_an_idle_device_is_done_when_it_returns():
    # More than a few copy chunks and no multiple of one: split between threads.
    src = torch.randn(5 * MiB + 7)
    _settle()
    dev = torch.empty_like(src, device="neuron")
    _, queued = _queued_host_copies(lambda: dev.copy_(src))
    assert queued == []  # copied from the calling thread: no staging copy, nothing queued
    assert torch.equal(dev.cpu(), src)
    assert torch.equal(src.to("neuron").cpu(), src)
    assert torch.equal(src[:-7].view(5, MiB).to("neuron").cpu(), src[:-7].view(5, MiB))
    # Conversions in the same pass: dtype, layout (a transposed source), broadcasting.
    rows = src[:-7].view(1280, 4096)
    _, queued = _queued_host_copies(lambda: (rows.to("neuron", torch.bfloat16), rows.t().to("neuron"),
                                             torch.empty(3, 4096, device="neuron").copy_(rows[0])))
    assert queued == []
    assert torch.equal(rows.to("neuron", torch.bfloat16).cpu(), rows.to(torch.bfloat16))
    assert torch.equal(rows.t().to("neuron").cpu(), rows.t())
    assert rows.t().to("neuron").stride() == rows.t().stride()  # to() keeps the strides it can
    assert torch.equal(torch.empty(3, 4096, device="neuron").copy_(rows[0]).cpu(), rows[0].expand(3, 4096))


def test_a_copy_behind_queued_work_keeps_stream_order():
    src = torch.rand(3 * MiB) + 0.5  # positive: sums in any order agree to float32's precision
    expected = src.clone()
    dst = torch.zeros(3 * MiB, device="neuron")
    a = torch.randn(768, 768, device="neuron")

    def step():
        b = a
        for _ in range(12):  # tens of milliseconds of queued products
            b = b @ a * 1e-3
        before = dst.sum()  # queued ahead of the copy: must read the zeros
        dst.copy_(src)  # the stream is busy: src is staged, the copy queued after
        src.fill_(7.0)  # the caller may reuse its memory as soon as copy_ returns
        return before, dst.sum(), b.sum()

    step()  # each signature's first run is synchronous: warm them up
    dst.zero_()
    src.copy_(expected)
    _settle()
    (before, after, _), queued = _queued_host_copies(step)
    assert before.item() == 0.0
    assert torch.equal(dst.cpu(), expected)
    assert after.item() == pytest.approx(expected.sum().item(), rel=1e-5)
    assert len(queued) == 1  # the busy stream took the staged path


def test_non_blocking_copies_with_pinned_memory():
    src = torch.arange(1000.0).pin_memory()
    dev = src.to("neuron", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(dev * 2, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(back, torch.arange(1000.0) * 2)


def test_dataloader_pin_memory():
    data = torch.arange(40.0).view(20, 2)
    labels = torch.arange(20)
    loader = DataLoader(TensorDataset(data, labels), batch_size=6, pin_memory=True)
    seen = []
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        xn = x.to("neuron", non_blocking=True)
        yn = y.to("neuron", non_blocking=True)
        seen.append(((xn * 2).sum(1) + yn).cpu())
    expected = (data * 2).sum(1) + labels
    assert torch.equal(torch.cat(seen), expected)


@pytest.mark.timeout(90)
def test_dataloader_forked_workers_after_device_use():
    # Worker processes are forked from a process whose device is in use; they
    # only build CPU batches (and must not trip over the fork check, e.g. when
    # DataLoader seeds them with torch.manual_seed).
    (torch.ones(2, device="neuron") * 2).cpu()
    data = torch.arange(40.0).view(20, 2)
    loader = DataLoader(TensorDataset(data), batch_size=4, num_workers=2, pin_memory=True,
                        multiprocessing_context="fork")
    total = torch.zeros((), device="neuron")
    for (x,) in loader:
        assert x.is_pinned()
        total += x.to("neuron", non_blocking=True).sum()
    assert total.item() == data.sum().item()
