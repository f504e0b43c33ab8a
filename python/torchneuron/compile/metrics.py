"""`torchneuron.compile_metrics()`: one record per compilation of the neuron backend.

A record is a plain dict (docs/compile.md lists the keys). It is created when
Dynamo hands a graph to the backend and completed as AOTAutograd's forward
and (at the first backward call) backward graphs are built.
"""
import copy
import threading
import time

_lock = threading.Lock()
_records: list[dict] = []
_next_graph_id = 0

NODE_CATEGORIES = ("native_kernels", "fused_groups", "extern")


def new_record(gm, mode: str, executor: str) -> dict:
    global _next_graph_id
    with _lock:
        graph_id = _next_graph_id
        _next_graph_id += 1
        record = {
            "graph_id": graph_id,
            "compile_id": _compile_id(),
            "mode": mode,
            "executor": executor,
            "dynamo_nodes": sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")),
            "nodes": {},
            # Per AOT graph: how it runs ("compiler" or "eager" and why), its program's
            # fused nodes and memory plan.
            "programs": {},
            "times_ms": {"dynamo": _dynamo_ms()},
            # "miss" (compiled), "hit" (the disk cache), "memory" (compiled earlier in this
            # process) or "partial" (forward and backward differ); set by the executor.
            "cache": "miss",
            "recompile_reason": _recompile_reason(),
            "fallback": None,
        }
        _records.append(record)
    return record


def count_nodes(gm) -> dict:
    """Node counts of an AOT graph before it is compiled: every ATen op as an
    extern call (what an eagerly run graph does); note_program replaces them
    with the compiled program's counts."""
    extern = sum(1 for n in gm.graph.nodes
                 if n.op == "call_function" and hasattr(n.target, "overloadpacket"))
    return {"native_kernels": 0, "fused_groups": 0, "extern": extern}


def note_program(record: dict, kind: str, program: dict, times_ms: dict | None = None) -> None:
    """Records how AOT graph `kind` runs: program["executor"] is "compiler" (with the
    program's node counts and memory plan) or "eager" (with the reason)."""
    with _lock:
        record.setdefault("programs", {})[kind] = dict(program)
        if program.get("executor") == "compiler":
            record.setdefault("nodes", {})[kind] = {key: program[key] for key in NODE_CATEGORIES}
        record.setdefault("times_ms", {}).update(times_ms or {})


class phase:
    """Times a phase into record["times_ms"][name]."""

    def __init__(self, record: dict, name: str):
        self.record, self.name = record, name

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        elapsed = (time.perf_counter() - self.start) * 1e3
        with _lock:
            times = self.record["times_ms"]
            times[self.name] = times.get(self.name, 0.0) + elapsed
        return False


def exclude_nested(record: dict, name: str, inner) -> None:
    """Makes phase `name` exclusive of the phases that ran inside it."""
    with _lock:
        times = record["times_ms"]
        times[name] -= sum(times.get(i, 0.0) for i in inner)


def compile_metrics() -> list[dict]:
    """A copy of every record of this process, oldest first."""
    with _lock:
        return copy.deepcopy(_records)


def reset_compile_metrics() -> None:
    """Forgets the records (graph ids keep counting up)."""
    with _lock:
        _records.clear()


def _compile_id():
    try:
        from torch._guards import CompileContext

        compile_id = CompileContext.current_compile_id()
        return None if compile_id is None else str(compile_id)
    except Exception:
        return None


def _metrics_context():
    from torch._dynamo.utils import get_metrics_context

    context = get_metrics_context()
    return context if context.in_progress() else None


def _dynamo_ms():
    """Time from the start of Dynamo's frame compilation to the backend call."""
    try:
        context = _metrics_context()
        start = getattr(context, "_start_time_ns", None) if context is not None else None
        return None if start is None else (time.time_ns() - start) / 1e6
    except Exception:
        return None


def _recompile_reason():
    """The guard that failed, if Dynamo compiles this frame again (its metrics context
    carries the first failure reason, as TORCH_LOGS=recompiles prints it)."""
    try:
        context = _metrics_context()
        return None if context is None else context._metrics.get("recompile_reason")
    except Exception:
        return None
