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
        return super().__new__(cls, device=torch.device("neuron", _checked_index(device, "Stream")),
                               priority=priority)


class _EventType(type):
    # torch.neuron.Event() returns a plain torch.Event: PyTorch's C methods
    # (Event.elapsed_time, Stream.record_event) accept torch.Event itself
    # only, not subclasses. isinstance(e, torch.neuron.Event) still holds
    # for every neuron event.
    def __instancecheck__(cls, obj):
        return isinstance(obj, torch.Event) and obj.device.type == "neuron"


class Event(metaclass=_EventType):
    """Marks a point in a stream; can be waited on and timed.

    Creates a torch.Event on neuron (see _EventType for why not a subclass).
    """

    def __new__(cls, enable_timing=False, blocking=False, interprocess=False):
        return torch.Event(device="neuron", enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


def current_stream(device=None) -> torch.Stream:
    return torch.accelerator.current_stream(_checked_index(device, "current_stream"))


def default_stream(device=None) -> torch.Stream:
    index = _checked_index(device, "default_stream")
    # The default stream has id 0 on every core.
    device_type = torch.accelerator.current_stream(index).device_type
    return torch.Stream(stream_id=0, device_index=index, device_type=device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Makes `stream` current inside a `with` block.

    Like torch.cuda.StreamContext: setting a stream also makes its device
    current, so on exit both the current device's previous stream and the
    stream's device's previous stream are restored, which also restores the
    current device.
    """

    def __init__(self, stream):
        self.stream = stream
        self.src_prev_stream = None
        self.dst_prev_stream = None

    def __enter__(self):
        if self.stream is None:
            return None
        self.src_prev_stream = current_stream()
        if self.src_prev_stream.device_index != self.stream.device_index:
            self.dst_prev_stream = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        if self.dst_prev_stream is not None:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)
