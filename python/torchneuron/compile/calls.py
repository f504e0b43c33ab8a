"""How one call of a compiled graph maps onto its program (serialize.Serialized).

The program takes tensors only: the graph's tensor inputs and its constants.
Integer inputs (a sliding-window cache's fill level, which Dynamo passes as a
runtime `SymInt`) and the integer arithmetic on them run here, on the host,
per call: a few Python operations, no device work, so the graph still runs
as one submission. The results are put back in the graph's output order.

A generator state saved by a forward graph (activation checkpointing) is a
neuron tensor when that forward ran as a program, a CPU tensor when it ran
eagerly; the backward's program takes it on the device (5 KB, moved here).

A plan refers to host values by node name, not by FX node, so that it can be
pickled into AOTAutograd's cache (output_code.py); its constants are pickled
as CPU tensors and go back to the graph's device when the plan is loaded.
"""
import operator

import torch


class _Host:
    """An argument of a host step that is the value of another host node."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __reduce__(self):
        return _Host, (self.name,)


class _Op:
    """An op overload by its name ("aten::add", "Tensor"): overloads do not pickle."""
    __slots__ = ("name", "overload", "_op")

    def __init__(self, op):
        self.name, self.overload = op._schema.name, op._overloadname
        self._op = op

    def __call__(self, *args, **kwargs):
        if self._op is None:
            namespace, name = self.name.split("::")
            self._op = getattr(getattr(getattr(torch.ops, namespace), name), self.overload)
        return self._op(*args, **kwargs)

    def __getstate__(self):
        return self.name, self.overload

    def __setstate__(self, state):
        self.name, self.overload = state
        self._op = None


def _host_arg(a):
    return _Host(a.name) if isinstance(a, torch.fx.Node) else a


class CallPlan:
    def __init__(self, serialized):
        self.inputs = serialized.inputs
        self.host_inputs = [(node.name, i) for node, i in serialized.host_inputs]
        self.host_steps = [
            (node.name, _Op(node.target) if isinstance(node.target, torch._ops.OpOverload) else node.target,
             torch.fx.node.map_aggregate(node.args, _host_arg), torch.fx.node.map_aggregate(node.kwargs, _host_arg))
            for node in serialized.host_nodes]
        self.outputs = [(kind, j.name if kind == "host" else j) for kind, j in serialized.outputs]
        self.device = serialized.device
        self.trivial = not self.host_inputs and not self.host_steps and all(
            kind == "arg" for kind, _ in self.inputs) and all(kind == "program" for kind, _ in self.outputs)

    def program_inputs(self, args: list, host: dict | None = None) -> list:
        if self.trivial:
            return list(args)
        return [args[i] if kind == "arg" else (
                self._on_device(args[i]) if kind == "rng_state" else (
                    self._on_device(host[i]) if kind == "host" else i))
                for kind, i in self.inputs]

    def _on_device(self, t):
        return t if t.device == self.device else t.to(self.device)

    def host_values(self, args: list) -> dict:
        values = {name: args[i] for name, i in self.host_inputs}
        def value(a):
            return values[a.name] if isinstance(a, _Host) else a

        for name, fn, fn_args, fn_kwargs in self.host_steps:
            call_args = [value(a) for a in fn_args]
            call_kwargs = {k: value(a) for k, a in fn_kwargs.items()}
            values[name] = fn(*call_args, **call_kwargs) if callable(fn) else getattr(operator, fn)(*call_args)
        return values

    def results(self, program_outputs: list, host: dict):
        if self.trivial:
            return program_outputs
        return [program_outputs[j] if kind == "program" else (host[j] if kind == "host" else None)
                for kind, j in self.outputs]

    # AOTAutograd saves and loads its cache entries under its fake tensor mode:
    # constants are real tensors, copied outside it.
    def __getstate__(self):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        state = dict(self.__dict__)
        with unset_fake_temporarily():
            state["inputs"] = [(kind, v.detach().cpu() if kind == "const" else v) for kind, v in self.inputs]
        state["device"] = None if self.device is None else str(self.device)
        return state

    def __setstate__(self, state):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        self.__dict__.update(state)
        self.device = None if self.device is None else torch.device(self.device)
        with unset_fake_temporarily():
            self.inputs = [(kind, v.to(self.device) if kind == "const" else v) for kind, v in self.inputs]
