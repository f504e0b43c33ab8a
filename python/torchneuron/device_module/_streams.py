"""Streams and events: in-order queues of the software NeuronCore."""
import torch

from ._device import _checked_index


class Stream(torch.Stream):
    """An in-order queue of work on a neuron core.

    Streams come from a fixed pool per core (like CUDA's), so creating many
    of them does not create many worker threads.
    """

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("neuron", _checked_index(device)),
                               priority=priority)


class Event(torch.Event):
    """Marks a point in a stream; can be waited on and timed."""

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return super().__new__(cls, device="neuron", enable_timing=enable_timing,
                               blocking=blocking, interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(_checked_index(device))


def default_stream(device=None) -> torch.Stream:
    index = _checked_index(device)
    # The default stream has id 0 on every core.
    device_type = torch.accelerator.current_stream(index).device_type
    return torch.Stream(stream_id=0, device_index=index, device_type=device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current on its device inside a `with` block."""

    def __init__(self, stream):
        self.stream = stream
        self.prev = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.prev = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.prev is not None:
            set_stream(self.prev)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
