"""How one call of a compiled graph maps onto its program (serialize.Serialized).

The program takes tensors only: the graph's tensor inputs and its constants.
Integer inputs (a sliding-window cache's fill level, which Dynamo passes as a
runtime `SymInt`) and the integer arithmetic on them run here, on the host,
per call: a few Python operations, no device work, so the graph still runs
as one submission. The results are put back in the graph's output order.

A generator state saved by a forward graph (activation checkpointing) is a
neuron tensor when that forward ran as a program, a CPU tensor when it ran
eagerly; the backward's program takes it on the device (5 KB, moved here).
"""
import operator


class CallPlan:
    def __init__(self, serialized):
        self.inputs = serialized.inputs
        self.host_inputs = serialized.host_inputs
        self.host_nodes = serialized.host_nodes
        self.outputs = serialized.outputs
        self.device = serialized.device
        self.trivial = not self.host_inputs and not self.host_nodes and all(
            kind == "arg" for kind, _ in self.inputs) and all(kind == "program" for kind, _ in self.outputs)

    def program_inputs(self, args: list) -> list:
        if self.trivial:
            return list(args)
        return [args[i] if kind == "arg" else (self._on_device(args[i]) if kind == "rng_state" else i)
                for kind, i in self.inputs]

    def _on_device(self, t):
        return t if t.device == self.device else t.to(self.device)

    def host_values(self, args: list) -> dict:
        values = {node: args[i] for node, i in self.host_inputs}
        for node in self.host_nodes:
            fn = node.target
            call_args = [values[a] if a in values else a for a in node.args]
            values[node] = fn(*call_args) if callable(fn) else getattr(operator, fn)(*call_args)
        return values

    def results(self, program_outputs: list, host: dict):
        if self.trivial:
            return program_outputs
        return [program_outputs[j] if kind == "program" else (host[j] if kind == "host" else None)
                for kind, j in self.outputs]
