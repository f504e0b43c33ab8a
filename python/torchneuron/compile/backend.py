"""The Dynamo backend `neuron`: `torch.compile(model, backend="neuron")`.

Dynamo graph -> checks -> AOTAutograd (decompositions.py; functionalized;
forward and backward) -> executor.build (the graph compiler: one program per
AOT graph, one device submission per call) -> the callable Dynamo runs. Every step is recorded in
compile_metrics() (metrics.py) and, with a debug directory, dumped (debug.py).
AOTAutograd's own cache keeps what it traced and what we compiled
(output_code.py), so that another process skips AOTAutograd's tracing.
"""
import functools
import time
import warnings

import torch

from . import cache, debug, device_interface, executor, metrics, output_code
from .decompositions import decomposition_table
from .options import resolve


class NeuronCompileError(RuntimeError):
    """A graph the neuron backend could not compile (with fallback='raise')."""


def neuron(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The backend function Dynamo calls with each captured graph."""
    opts = resolve(mode, options)
    device_interface.register()
    record = metrics.new_record(gm, opts.mode, executor.NAME)
    debug.dump(opts.debug_dir, record, "dynamo", gm)
    try:
        with metrics.phase(record, "checks"):
            _check_inputs(gm, example_inputs, record)
        with metrics.phase(record, "aot"):
            try:
                compiled = _aot(gm, example_inputs, opts, record)
            except Exception as exc:
                why = _data_dependent(exc)
                if why is None:
                    raise
                # An op whose ATen decomposition reads tensor values (index_fill's
                # 0-dim index, take's bounds, index_put's boolean mask) cannot be
                # traced into a static graph: the whole graph runs eagerly, like a
                # graph with a data-dependent op the executor refuses.
                metrics.note_program(record, "dynamo", {"executor": "eager", "reason": why})
                return gm.forward
        metrics.exclude_nested(record, "aot", ("executor_forward", "executor_backward", "executor_inference"))
        return compiled
    except Exception as exc:
        message = exc.args[0] if isinstance(exc, NeuronCompileError) and exc.args else (
            f"[neuron] compile: graph {record['graph_id']} (Dynamo compile id {record['compile_id']}): "
            f"{type(exc).__name__}: {exc}")
        if opts.fallback != "eager":
            raise NeuronCompileError(message) from exc
        record["fallback"] = message
        _warn_fallback(message)
        return gm.forward  # the Dynamo graph, run eagerly op by op


def _aot(gm, example_inputs, opts, record):
    from torch._dynamo.utils import counters
    from torch._functorch import config as functorch_config
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def compiler(kind):
        def compile_graph(aot_gm, aot_inputs):
            record["nodes"][kind] = metrics.count_nodes(aot_gm)
            debug.dump(opts.debug_dir, record, f"aot_{kind}", aot_gm)
            start = time.perf_counter_ns()
            with metrics.phase(record, f"executor_{kind}"):
                try:
                    runner = executor.build(aot_gm, aot_inputs,
                                            executor.GraphInfo(record["graph_id"], kind, opts.mode, opts.debug_dir),
                                            record)
                except Exception as exc:
                    raise NeuronCompileError(
                        f"[neuron] compile: graph {record['graph_id']} ({kind}): the executor failed: "
                        f"{type(exc).__name__}: {exc}") from exc
            return output_code.NeuronOutputCode(kind, runner, time.perf_counter_ns() - start)

        return SerializableAOTDispatchCompiler(output_code.NeuronOutputCode, compile_graph)

    # AOTAutograd's cache key covers the Dynamo graph with its attributes: this
    # one names the backend and everything its entries depend on (output_code.py).
    gm._torchneuron_backend = cache.backend_identity(opts.mode)
    before = dict(counters["aot_autograd"])
    with output_code.compiling(record, opts), functorch_config.patch(
            bundled_autograd_cache=True, force_non_lazy_backward_lowering=True,
            enable_autograd_cache=functorch_config.enable_autograd_cache and cache.cache_dir() is not None):
        compiled = aot_module_simplified(
            gm, example_inputs,
            fw_compiler=compiler("forward"),
            bw_compiler=compiler("backward"),
            inference_compiler=compiler("inference"),
            partition_fn=min_cut_rematerialization_partition,
            decompositions=decomposition_table(),
            # KV caches, BatchNorm statistics, optimizer state: mutations of the inputs stay
            # in-place updates of the caller's tensors (copy_ at the graph's end).
            keep_inference_input_mutations=True,
        )
    record["aot_cache"] = _aot_cache_state(before, counters["aot_autograd"])
    return compiled


def _aot_cache_state(before: dict, after) -> str:
    """What AOTAutograd's cache did for this graph, from its counters."""
    for state in ("hit", "bypass", "miss"):
        if after.get(f"autograd_cache_{state}", 0) > before.get(f"autograd_cache_{state}", 0):
            return state
    return "off"


def _data_dependent(exc):
    """The reason when AOTAutograd's tracing met an op whose result or output
    shape depends on tensor values; None for any other failure."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    while exc is not None:
        if isinstance(exc, (DataDependentOutputException, DynamicOutputShapeException)):
            return f"data-dependent op in AOTAutograd's tracing: {type(exc).__name__}: {exc}"
        exc = exc.__cause__ or exc.__context__
    return None


def _input_name(node):
    try:
        name = node.meta["grapharg"].source.name  # a property in torch 2.13, a method before
        return name() if callable(name) else name
    except Exception:
        return node.name


def _is_neuron(value):
    return isinstance(value, torch.Tensor) and value.device.type == "neuron"


def uses_neuron(gm, example_inputs) -> bool:
    """Whether a Dynamo graph has a neuron tensor: an input (parameters are inputs too)
    or any value computed inside (`.to("neuron")`, factories with device="neuron")."""
    if any(_is_neuron(v) for v in example_inputs):
        return True
    return any(_is_neuron(n.meta.get("example_value", n.meta.get("val"))) for n in gm.graph.nodes)


def _check_inputs(gm, example_inputs, record):
    """A graph of the neuron backend must work on neuron tensors. Graphs that mix
    devices legitimately (an explicit `.to("neuron")` inside) pass; a graph with
    no neuron tensor at all is refused, naming its first CPU input."""
    if uses_neuron(gm, example_inputs):
        return
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            raise NeuronCompileError(
                f"[neuron] compile: graph {record['graph_id']}: input {_input_name(node)} is a {value.device} "
                f"tensor {tuple(value.shape)} {value.dtype} and the graph has no neuron tensor; "
                "backend='neuron' compiles graphs of neuron tensors: move the model and its inputs with "
                ".to('neuron') (or compile this function with a CPU backend)")


@functools.cache
def _warn_fallback(message):
    """One warning per graph (Dynamo compiles a graph once; the cache covers retries)."""
    warnings.warn(f"{message}; running this graph eagerly (fallback='eager')", stacklevel=3)
