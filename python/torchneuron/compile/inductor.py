"""`torch.compile(..., backend="inductor")` named explicitly on neuron tensors.

Inductor generates code per device (`register_backend_for_device`: a
scheduling, a wrapper code generator, an optional custom pass); for a device
it does not know it fails deep in code generation with `KeyError: 'neuron'`.
Inductor could be given CPU C++ code generation for this device (its memory is
host memory), but that bypasses the device queues and needs a C++ compiler
and OpenMP at run time; the neuron backend is this device's compiler instead.

So neuron is registered with Inductor only to refuse clearly: the scheduling
and wrapper code generator registered for it raise the error below at the
first question Inductor asks them (its FX graph cache asks the wrapper class
whether it supports caching, before lowering), and so does the custom backend
pass, which Inductor runs on the post-grad graph of every graph with a tensor
on the device. Graphs without neuron tensors never see any of it.
"""
from torch._inductor.custom_graph_pass import CustomGraphModulePass

MESSAGE = ("[neuron] Inductor has no code generator for the neuron device: compile neuron models with "
           "torch.compile(model, backend=\"neuron\") (or with no backend argument: the default backend "
           "picks \"neuron\" for graphs with neuron tensors)")


class _Refuse(CustomGraphModulePass):
    def __call__(self, gm):
        raise RuntimeError(MESSAGE)

    def uuid(self):
        return "torchneuron.refuse-inductor-v1"  # part of Inductor's cache keys: keep it stable


class _Refusing(type):
    def __getattr__(cls, name):  # any question Inductor asks the code generator (supports_caching, create, ...)
        raise RuntimeError(MESSAGE)


class _RefusingCodegen(metaclass=_Refusing):
    def __init__(self, *args, **kwargs):
        raise RuntimeError(MESSAGE)


def register(common) -> None:
    """Registers the refusal with Inductor (`common` is torch._inductor.codegen.common)."""
    if common.get_scheduling_for_device("neuron") is None:
        common.register_backend_for_device("neuron", _RefusingCodegen, _RefusingCodegen,
                                           device_custom_pass=_Refuse())
