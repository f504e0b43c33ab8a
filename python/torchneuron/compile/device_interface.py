"""Dynamo's `DeviceInterface` for `neuron`: what Dynamo (and anything built on
its device abstraction) asks of a device, answered by `torch.neuron`.

Registered by the backend on first use (`register()`), and by the default
backend hook, so that importing torchneuron never imports Dynamo.
"""
import torch
from torch._dynamo import device_interface as _di


def _device_index(device=None) -> int:
    if device is None:
        return torch.neuron.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return torch.neuron.current_device() if device.index is None else device.index


class NeuronInterface(_di.DeviceInterface):
    device = torch.neuron.device  # type: ignore[assignment]
    Event = torch.neuron.Event  # type: ignore[assignment]  (a torch.Event on neuron)
    Stream = torch.neuron.Stream  # type: ignore[assignment]  (a torch.Stream subclass)

    class Worker:
        # Properties read in the main process; a software NeuronCore has no
        # fork-unsafe state to avoid here, but keep the contract's shape.
        @staticmethod
        def set_device(device: int) -> None:
            _di.caching_worker_current_devices["neuron"] = device

        @staticmethod
        def current_device() -> int:
            return _di.caching_worker_current_devices.get("neuron", torch.neuron.current_device())

        @staticmethod
        def get_device_properties(device=None):
            if "neuron" not in _di.caching_worker_device_properties:
                _di.caching_worker_device_properties["neuron"] = [
                    torch.neuron.get_device_properties(i) for i in range(torch.neuron.device_count())
                ]
            index = NeuronInterface.Worker.current_device() if device is None else _device_index(device)
            return _di.caching_worker_device_properties["neuron"][index]

    current_device = staticmethod(torch.neuron.current_device)
    set_device = staticmethod(torch.neuron.set_device)
    device_count = staticmethod(torch.neuron.device_count)
    is_available = staticmethod(torch.neuron.is_available)
    stream = staticmethod(torch.neuron.stream)  # type: ignore[assignment]
    current_stream = staticmethod(torch.neuron.current_stream)
    set_stream = staticmethod(torch.neuron.set_stream)  # type: ignore[assignment]
    synchronize = staticmethod(torch.neuron.synchronize)
    get_device_properties = staticmethod(torch.neuron.get_device_properties)  # type: ignore[assignment]
    memory_allocated = staticmethod(torch.neuron.memory_allocated)
    is_bf16_supported = staticmethod(torch.neuron.is_bf16_supported)  # type: ignore[arg-type]

    @staticmethod
    def exchange_device(device: int) -> int:
        previous = torch.neuron.current_device()
        if device >= 0 and device != previous:
            torch.neuron.set_device(device)
        return previous

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return NeuronInterface.exchange_device(device)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        torch.neuron.set_stream(torch.Stream(stream_id=stream_id, device_index=device_index,
                                             device_type=device_type))

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        # The id of the current stream of the core (0 = its default stream): what
        # generated code would pass to the runtime to queue work on that stream.
        return torch.neuron.current_stream(device_idx).stream_id

    @staticmethod
    def get_compute_capability(device=None):
        return ""  # a software NeuronCore has no compute-capability version

    @classmethod
    def is_dtype_supported(cls, dtype: torch.dtype, including_emulation: bool = False) -> bool:
        return dtype in torch.neuron.get_device_capability()["supported_dtypes"]

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False


_registered = False


def register() -> None:
    """Registers the interface with Dynamo (idempotent)."""
    global _registered
    if _registered:
        return
    _di.register_interface_for_device("neuron", NeuronInterface)
    for i in range(torch.neuron.device_count()):
        _di.register_interface_for_device(f"neuron:{i}", NeuronInterface)
    _registered = True
