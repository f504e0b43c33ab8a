"""Functional collectives in compiled graphs.

torch.distributed._functional_collectives and DTensor put `_c10d_functional`
ops in a graph: a collective (`all_reduce`, `all_gather_into_tensor`,
`reduce_scatter_tensor`, ...) returning a new tensor, and a `wait_tensor` of
that tensor before it is read. On a group whose neuron backend is
ProcessGroupNeuron, those of IN_PROGRAM run inside the compiled program as steps of
its one task (csrc/compiler/ProgramCollectives.h): each takes its turn on the
group's queue when the program is launched, in issue order with the group's
other collectives, and the program's task runs it when it gets there. A step
is finished when the program goes on, so `wait_tensor` has nothing to wait for:
the program reads the collective's result directly.

The coalesced forms (a list in, a list out) become one collective per tensor,
in list order, as ProcessGroupNeuron runs an eager coalesced call. Groups without
a neuron backend make the graph run eagerly, with the reason in
compile_metrics(): there the ops run as eager collectives with their waits.
"""
import operator

import torch
import torch.fx


def is_opaque(value) -> bool:
    """An opaque object input (DTensor's device mesh, a process group): passed
    through on the host like integer inputs; an op reading it makes the graph
    run eagerly (serialize.py)."""
    from torch._library.fake_class_registry import FakeScriptObject

    return isinstance(value, (FakeScriptObject, torch.ScriptObject))

NAMESPACE = "_c10d_functional"
# Ops that run inside programs (the compiler's extern steps of these names are
# taken by csrc/compiler/ProgramCollectives.cpp).
IN_PROGRAM = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast")
_GROUP_ARG = {"all_reduce": 2, "all_gather_into_tensor": 2, "reduce_scatter_tensor": 3, "all_to_all_single": 3,
              "broadcast": 2}
# Coalesced op -> the op it runs per tensor (the same arguments after the list).
_COALESCED = {"all_reduce_coalesced": "all_reduce",
              "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
              "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor"}


def _unsupported(why):
    from .serialize import Unsupported

    return Unsupported(why)


def _functional(node):
    """The op's name if `node` is a `_c10d_functional` op, else None."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    return node.target._schema.name.split("::")[1] if node.target.namespace == NAMESPACE else None


def _neuron_group(name: str) -> bool:
    import torch.distributed.distributed_c10d as c10d

    from torchneuron import _C

    try:
        pg = c10d._resolve_process_group(name)
        backend = pg._get_backend(torch.device("neuron"))
    except (RuntimeError, ValueError, KeyError):
        return False
    return isinstance(backend, _C._init_distributed().ProcessGroupNeuron)


def _split_coalesced(graph: torch.fx.Graph) -> None:
    """Each coalesced collective becomes one collective per tensor of its list, in
    list order; readers of its results (getitem) read those."""
    for node in list(graph.nodes):
        name = _functional(node)
        if name not in _COALESCED:
            continue
        if node.kwargs or any(u.target is not operator.getitem for u in node.users):
            raise _unsupported(f"node {node.name}: {node.target} with keyword arguments or its "
                               f"list of results read whole")
        single = getattr(torch.ops._c10d_functional, _COALESCED[name]).default
        vals = node.meta.get("val")
        parts = []
        with graph.inserting_before(node):
            for i, t in enumerate(node.args[0]):
                part = graph.call_function(single, (t, *node.args[1:]))
                if vals is not None:
                    part.meta["val"] = vals[i]
                parts.append(part)
        for user in list(node.users):
            user.replace_all_uses_with(parts[user.args[1]])
            graph.erase_node(user)
        graph.erase_node(node)


def for_program(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` as the compiler takes it: without `wait_tensor` nodes and coalesced
    collectives when it has functional collectives (a copy; `gm` itself keeps them
    for the eager path). Raises serialize.Unsupported, naming the node, for
    collectives that cannot run inside a program."""
    if not any(_functional(n) is not None for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    env: dict = {}
    results, _ = graph.graph_copy(gm.graph, env, return_output_node=True)
    graph.output(results)
    _split_coalesced(graph)
    ops = [(n, _functional(n)) for n in graph.nodes]
    ops = [(n, name) for n, name in ops if name is not None]
    for node, name in ops:
        if name == "wait_tensor":
            # A wait for a collective issued outside the graph (an AsyncCollectiveTensor
            # input) must wait for it: eagerly.
            source = node.args[0]
            if not isinstance(source, torch.fx.Node) or _functional(source) not in IN_PROGRAM:
                raise _unsupported(f"node {node.name}: wait_tensor of {node.args[0]}, a collective issued "
                                   f"outside the graph")
            continue
        if name not in IN_PROGRAM:
            raise _unsupported(f"node {node.name}: functional collective {node.target} runs eagerly "
                              f"(in programs: {', '.join(IN_PROGRAM)})")
        group = node.args[_GROUP_ARG[name]]
        if not _neuron_group(group):
            raise _unsupported(f"node {node.name}: group {group!r} of {node.target} has no neuron backend "
                              f"(ProcessGroupNeuron)")
    for node in list(graph.nodes):
        if _functional(node) == "wait_tensor":
            # The wait's result is the collective's: its readers' views (a split of
            # an all-gathered tensor) name the wait's fake storage, so the collective
            # takes that value as its own.
            if "val" in node.meta:
                node.args[0].meta["val"] = node.meta["val"]
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    return torch.fx.GraphModule(gm, graph)


def count(extern_ops: dict) -> int:
    """The collective steps of a program, from its record's extern_ops."""
    return sum(n for op, n in extern_ops.items()
               if op.startswith(NAMESPACE + "::") and op.split("::")[1].split(".")[0] in IN_PROGRAM)
