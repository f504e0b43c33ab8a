"""The seam between the front end and what runs a graph on the device.

`build(gm, example_inputs, info, record)` receives one AOTAutograd graph
(forward, backward or inference; functionalized, decomposed by
decompositions.py) with its example (fake) inputs, and returns a callable
that takes the graph's inputs as one list (AOTAutograd's boxed calling
convention) and returns its outputs.

The graph compiler (`compiler/`, torch-free C++): serialize.py writes the
graph with every value's layout, `_C._compile_graph` fuses, plans and lowers
it to a program, and each call runs that program as ONE task on the current
stream (csrc/compiler/CompiledGraph.h): fused elementwise groups on the tile
interpreter, every other node as an extern call of its ATen CPU kernel on the
device buffers, intermediates in one planned arena.

A graph that cannot be one submission (serialize.Unsupported: symbolic
shapes, data-dependent output shapes, host reads, other devices; or a node the
compiler does not lower, such as the device's attention with dropout) runs
eagerly instead, node by node as the device's eager kernels; the record says
which path each graph took and why. Integer inputs and constants go through
the call plan (calls.py).
"""
import re
from dataclasses import dataclass

import torch

from . import calls, collectives, constants, metrics, serialize

NAME = "compiler"  # recorded in compile_metrics() as the record's "executor"


@dataclass(frozen=True)
class GraphInfo:
    graph_id: int
    kind: str  # "forward", "backward" or "inference"
    mode: str
    debug_dir: str | None = None


@dataclass
class ProgramGraph:
    """A graph lowered to a program, in the form AOTAutograd's cache pickles
    (output_code.py): the compiler's input text, from which the program is
    found in the program caches or compiled again, and the call plan."""
    text: str
    plan: calls.CallPlan
    constant_folded: int


def build(gm: torch.fx.GraphModule, example_inputs, info: GraphInfo, record: dict | None = None):
    """The runner of one AOT graph: a boxed callable whose `program_graph` is
    its ProgramGraph, or None when the graph runs eagerly."""
    record = record if record is not None else {}
    try:
        with metrics.phase(record, f"fold_{info.kind}"):
            program_gm, constant_folded = constants.fold(gm)
        with metrics.phase(record, f"serialize_{info.kind}"):
            serialized = serialize.serialize(collectives.for_program(program_gm))
        graph = ProgramGraph(serialized.text, calls.CallPlan(serialized), constant_folded)
        compiled, cache_state = _program(graph.text, info, _label(info))
    except (serialize.Unsupported, NotImplementedError) as why:
        # NotImplementedError: the compiler's NotLowered (a node its kernels do not take).
        reason = str(why.args[0]).split("not lowered: ")[-1].split("\n")[0]
        metrics.note_program(record, info.kind, {"executor": "eager", "reason": reason})
        return _eager(gm, info)
    return _runner(graph, compiled, cache_state, info, record)


def load(graph: ProgramGraph, info: GraphInfo, record: dict | None = None):
    """The runner of a graph AOTAutograd's cache returned: its program from
    this process or the disk cache, or compiled again from the graph's text."""
    compiled, cache_state = _program(graph.text, info, _label(info))
    return _runner(graph, compiled, cache_state, info, record if record is not None else {})


def _label(info: GraphInfo) -> str:
    return f"graph {info.graph_id} ({info.kind})"


def _runner(graph: ProgramGraph, compiled, cache_state: str, info: GraphInfo, record: dict):
    report = compiled.report
    metrics.note_program(record, info.kind, {
        "executor": "compiler", "reason": None, "cache": cache_state,
        "native_kernels": report["native_kernels"], "native_nodes": report["native_nodes"],
        "reinplaced": report["reinplaced"], "folded": report["folded"], "constant_folded": graph.constant_folded,
        "library_calls": report["library_calls"],
        "extern_ops": dict(report["extern_ops"]), "collectives": collectives.count(report["extern_ops"]),
        "fused_groups": report["fused_groups"], "fused_nodes": report["fused_nodes"], "extern": report["extern"],
        "arena_bytes": report["arena_bytes"], "output_bytes": report["output_bytes"],
    }, {f"{phase}_{info.kind}": ms for phase, ms in report["times_ms"].items()})
    states = {p["cache"] for p in record.get("programs", {}).values() if p.get("executor") == "compiler"}
    record["cache"] = states.pop() if len(states) == 1 else "partial"
    from . import debug

    debug.dump_text(info.debug_dir, record, f"graph_{info.kind}.neurongraph", graph.text)
    for ir_pass, ir in report["ir"].items():  # empty for a program from the cache
        if ir:
            debug.dump_text(info.debug_dir, record, f"ir_{info.kind}_{ir_pass}.txt", ir)
    debug.dump_text(info.debug_dir, record, f"program_{info.kind}.txt", compiled.describe())

    plan, label = graph.plan, _label(info)

    def run(args):
        host = plan.host_values(args) if not plan.trivial else None
        inputs = plan.program_inputs(args, host)
        args.clear()  # boxed: the caller's list lets go of inputs we no longer need
        try:
            return plan.results(compiled.run(inputs), host)
        except Exception as exc:
            exc.add_note(f"[neuron] in compiled {label}")
            raise

    run._boxed_call = True
    run.compiled_graph = compiled
    run.program_graph = graph
    return run


# Programs of this process by key: a graph compiled again (after
# torch._dynamo.reset(), or the same layer in another frame) is not reloaded.
_programs: dict = {}


def clear_programs() -> None:
    """Forgets this process's programs (the disk cache stays)."""
    _programs.clear()


def _program(text: str, info: GraphInfo, label: str):
    """(compiled graph, "memory" | "hit" | "miss"): from this process, from the
    disk cache (cache.py), or compiled now and stored there."""
    from torchneuron import _C

    from . import cache

    key = cache.program_key(text.encode(), {"mode": info.mode})
    compiled = _programs.get(key)
    if compiled is not None:
        return compiled, "memory"
    payload, _ = cache.load(key)
    state = "miss"
    if payload is not None:
        try:
            compiled, state = _C._load_compiled_graph(payload, label), "hit"
        except Exception as exc:  # noqa: BLE001 - a bad entry is rebuilt, never fatal
            import warnings

            warnings.warn(f"[neuron] compile cache: entry {key[:16]} does not load ({exc}); compiling again")
    if compiled is None:
        compiled = _C._compile_graph(text, label, info.debug_dir is not None)
        cache.store(key, compiled.serialize())
    _programs[key] = compiled
    return compiled, state


def _eager(gm, info):
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
    run.program_graph = None
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
