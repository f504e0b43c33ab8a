"""Events: torch.neuron.Event and torch.Event on neuron: record, query,
synchronize, wait, elapsed_time, and ordering between streams."""
import pytest
import torch

# queued work and synchronization: a deadlock must fail, not hang the run
pytestmark = pytest.mark.timeout(60)


def _busy(x, n=4):
    for _ in range(n):
        x = torch.tanh(x @ x / x.shape[0])
    return x


def _busy_ref(a, n=4):
    for _ in range(n):
        a = torch.tanh(a @ a / a.shape[0])
    return a


def test_event_kinds():
    e = torch.neuron.Event()
    t = torch.Event(device="neuron")
    assert isinstance(e, torch.Event)
    assert isinstance(e, torch.neuron.Event) and isinstance(t, torch.neuron.Event)
    assert not isinstance(torch.Event(device="cpu"), torch.neuron.Event)
    assert e.device.type == "neuron" and t.device.type == "neuron"
    assert e.query()  # never recorded: nothing to wait for
    e.synchronize()


def test_record_query_synchronize():
    a = torch.randn(256, 256)
    e = torch.neuron.Event()
    y = _busy(a.to("neuron"))
    e.record()
    assert e.device == torch.device("neuron:0")
    e.synchronize()
    assert e.query()
    torch.testing.assert_close(y.cpu(), _busy_ref(a))


def test_record_on_stream_and_record_event():
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        y = torch.ones(100, device="neuron") * 3
    e = torch.neuron.Event()
    e.record(s)
    f = s.record_event()
    assert isinstance(f, torch.neuron.Event)
    g = torch.neuron.Event()
    assert s.record_event(g) is g
    for ev in (e, f, g):
        ev.synchronize()
        assert ev.query()
    assert torch.equal(y.cpu(), torch.full((100,), 3.0))


def test_ordering_between_two_streams_with_an_event():
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()
    a = torch.randn(256, 256)
    x = a.to("neuron")
    s1.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(s1):
        y = _busy(x, 6)
        done = torch.neuron.Event()
        done.record()  # on s1
    s2.wait_event(done)
    with torch.neuron.stream(s2):
        z = y * 2 - 1  # must see s1's final y
    s2.synchronize()
    torch.testing.assert_close(z.cpu(), _busy_ref(a, 6) * 2 - 1)


def test_event_wait_makes_stream_wait():
    s1, s2 = torch.neuron.Stream(), torch.neuron.Stream()
    a = torch.randn(200, 200)
    with torch.neuron.stream(s1):
        y = _busy(a.to("neuron"), 5)
    e = torch.Event(device="neuron")
    e.record(s1)
    e.wait(s2)
    with torch.neuron.stream(s2):
        w = y.sum(0)
    s2.synchronize()
    torch.testing.assert_close(w.cpu(), _busy_ref(a, 5).sum(0))


def test_event_across_cores(two_cores):
    a = torch.randn(128, 128)
    y0 = _busy(a.to("neuron:0"))
    e = torch.neuron.Event()
    e.record(torch.neuron.current_stream(0))
    s1 = torch.neuron.current_stream(1)
    s1.wait_event(e)
    with torch.neuron.device(1):
        y1 = y0.to("neuron:1") + 1
    torch.testing.assert_close(y1.cpu(), _busy_ref(a) + 1)


def test_elapsed_time():
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    start.record()
    _busy(torch.randn(128, 128, device="neuron"))
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0
    # torch.Event and torch.neuron.Event are interchangeable
    other = torch.Event(device="neuron", enable_timing=True)
    other.record()
    other.synchronize()
    assert start.elapsed_time(other) >= ms
    assert other.elapsed_time(start) <= 0.0


def test_elapsed_time_misuse_is_a_clear_error():
    plain1, plain2 = torch.neuron.Event(), torch.neuron.Event()
    plain1.record()
    plain2.record()
    torch.neuron.synchronize()
    with pytest.raises(ValueError, match="enable_timing=True"):
        plain1.elapsed_time(plain2)
    timed1 = torch.neuron.Event(enable_timing=True)
    timed2 = torch.neuron.Event(enable_timing=True)
    timed1.record()
    with pytest.raises(ValueError, match="recorded"):
        timed1.elapsed_time(timed2)  # timed2 was never recorded


def test_synchronize_waits_for_every_stream(two_cores):
    s = torch.neuron.Stream(device=1)
    a = torch.randn(128, 128)
    with torch.neuron.stream(s):
        y = _busy(a.to("neuron:1"))
    torch.neuron.synchronize(1)
    assert s.query()
    torch.testing.assert_close(y.cpu(), _busy_ref(a))


def test_event_after_failed_work_completes_and_error_is_reported_once():
    # An event behind failed work completes (waiting on it does not hang); the
    # error is reported once, by whichever synchronization comes first.
    x = torch.randn(5, 3, device="neuron")
    # the first call of the signature runs synchronously; the next is queued
    torch.index_select(x, 0, torch.tensor([1], device="neuron"))
    torch.index_select(x, 0, torch.tensor([8], device="neuron"))
    reported = []
    e = torch.neuron.Event()
    for step in (e.record, e.synchronize, torch.neuron.synchronize, torch.neuron.synchronize):
        try:
            step()
        except IndexError as err:
            reported.append(str(err))
    assert len(reported) == 1, reported
    assert "raised by queued op aten::index_select" in reported[0]
    assert e.query()
