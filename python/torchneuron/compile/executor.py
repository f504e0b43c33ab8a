"""The seam between the front end and whatever runs a graph on the device.

`build(gm, example_inputs, info)` receives one AOTAutograd graph (forward,
backward or inference; functionalized, decomposed by decompositions.py) with
its example (fake) inputs, and returns a callable that takes the graph's
inputs as one list (AOTAutograd's boxed calling convention) and returns its
outputs.

Today: eager execution of the AOT graph. The FX GraphModule's code calls each
ATen op, so every node runs as the device's eager kernel, queued on the
current stream like any eager op (no fusion, no single submission, no
compiled speed).

Next: the graph compiler (`compiler/`) replaces the body of `build`: serialize
`gm` with the inputs' layouts, compile it (fusion, memory planning, lowering;
cached on disk) and return a callable that submits the program once per call.
Nodes it cannot lower run inside the program as extern ATen calls.
"""
import re
from dataclasses import dataclass

import torch

NAME = "eager"  # recorded in compile_metrics() as the record's "executor"


@dataclass(frozen=True)
class GraphInfo:
    graph_id: int
    kind: str  # "forward", "backward" or "inference"
    mode: str


def build(gm: torch.fx.GraphModule, example_inputs, info: GraphInfo):
    from torch.fx.graph import _BoxedCodeGen

    # Boxed code takes the input list and may free each input as soon as it is
    # used, as AOTAutograd expects of its compiled functions.
    gm.graph.set_codegen(_BoxedCodeGen())
    gm.recompile()
    forward = gm.forward

    def run(args):
        try:
            return forward(args)
        except Exception as exc:
            exc.add_note(f"[neuron] in compiled graph {info.graph_id} ({info.kind}){_failing_node(gm, exc)}")
            raise

    run._boxed_call = True
    return run


def _failing_node(gm, exc) -> str:
    """', node add_1 (aten.add.Tensor)' for the graph line the error came from ('' if unknown).

    FX names each line's result after its node, so the line of the generated code
    in the traceback names the node."""
    code = gm.forward.__code__
    tb, lineno = exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code is code:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    lines = gm.code.splitlines()
    if lineno is None or not 0 < lineno <= len(lines):
        return ""
    match = re.match(r"\s*(\w+)\s*=", lines[lineno - 1])
    node = next((n for n in gm.graph.nodes if match and n.name == match.group(1)), None)
    return "" if node is None else f", node {node.name} ({node.target})"
