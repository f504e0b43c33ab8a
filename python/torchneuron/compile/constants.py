"""Constant folding: the parts of a graph that depend on none of its inputs
are computed once, when the graph is compiled, and the program reads their
results as constants.

Transformers builds a training step's attention mask from positions made by
`torch.arange` (`masking_utils`: a packed-sequence check, the causal rule, and
index gathers that combine them: about twenty small integer and boolean ops),
and a decode step's cache positions from `arange(0, 1)`. None of that depends
on a graph input, and none of it is elementwise over floats, so every one of
those nodes was an extern call each step. Inductor folds such subgraphs too.

A node is constant when it is an ATen op that is pure (no mutable argument,
not random, not `empty`, whose contents are undefined) and every tensor it
reads is constant. Of the constant nodes, those read by a non-constant node
(or returned) are evaluated on the device, outside AOTAutograd's fake mode,
and replaced by graph attributes: serialize.py passes an attribute to the
program as a constant input. Left to the compiler: a constant that is a
plain fill (`full`, `zeros`, `ones`, `scalar_tensor`), which a fused group
computes from an immediate, or a view of one (the compiler reads it where the
fill lies, and sees that it reads zeros: neuroncompiler/simplify.hpp), and
one above `MAX_BYTES`, which would be held for the graph's lifetime.

A constant whose evaluation raises (an out-of-range index into an arange) is
left unfolded, with what depends on it: the program reports the error when it
runs, as for any other op that fails.

The program's cache key is its text, which names a folded constant by shape
and dtype only; the values are recomputed here on every compilation (a cache
hit included), from the graph they came from.
"""
import operator

import torch

MAX_BYTES = 16 << 20

_FILLS = {
    torch.ops.aten.full.default, torch.ops.aten.zeros.default, torch.ops.aten.ones.default,
    torch.ops.aten.scalar_tensor.default,
}
_UNDEFINED_CONTENTS = {
    torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default, torch.ops.aten.empty_like.default,
    torch.ops.aten.new_empty.default, torch.ops.aten.new_empty_strided.default, torch.ops.aten.empty_permuted.default,
}


def _pure_aten(target) -> bool:
    if not isinstance(target, torch._ops.OpOverload) or target.namespace != "aten":
        return False
    if target in _UNDEFINED_CONTENTS or torch.Tag.nondeterministic_seeded in target.tags:
        return False
    return not target._schema.is_mutable


def _constant_nodes(graph) -> list:
    constant = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if not (_pure_aten(node.target) or node.target is operator.getitem):
            continue
        if all(n in constant for n in node.all_input_nodes):
            constant[node] = True
    return list(constant)


def _worth_folding(node) -> bool:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or _fill_or_view_of_one(node):
        return False
    return val.numel() * val.element_size() <= MAX_BYTES


def _fill_or_view_of_one(node) -> bool:
    while isinstance(node.target, torch._ops.OpOverload) and node.target.is_view and node.args:
        node = node.args[0]
    return isinstance(node, torch.fx.Node) and node.target in _FILLS


class _Folded(torch.nn.Module):
    """A folded graph with its constants, as serialize.py reads a GraphModule
    (`.graph`, attributes by name). Not a GraphModule: its Python code
    generation, which nothing runs here, cost several times the fold itself."""

    def __init__(self, graph, original):
        super().__init__()
        self.graph = graph
        from torch.fx.graph_module import _copy_attr

        for node in graph.nodes:  # the original's own attributes the copy refers to
            if node.op == "get_attr":
                _copy_attr(original, self, node.target)


def fold(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, int]:
    """(a copy of gm with its constant subgraphs folded, the number of nodes
    folded away), or (gm, 0) when there is nothing to fold."""
    constant = _constant_nodes(gm.graph)
    is_constant = set(constant)
    frontier = [n for n in constant if any(u not in is_constant for u in n.users) and _worth_folding(n)]
    if not frontier:
        return gm, 0
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    values = {}
    with unset_fake_temporarily(), torch.no_grad():
        needed = set()
        stack = list(frontier)
        while stack:
            n = stack.pop()
            if n not in needed:
                needed.add(n)
                stack.extend(n.all_input_nodes)
        failed = set()
        for node in constant:  # graph order: inputs first
            if node not in needed:
                continue
            if any(a in failed for a in node.all_input_nodes):
                failed.add(node)
                continue
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: values[a])
            try:
                values[node] = node.target(*args, **kwargs)
            except Exception:
                # Left to the program: its step raises the op's eager error, naming
                # the graph and step, when (and only if) it runs.
                failed.add(node)
        folded_values = {}
        for node in frontier:
            if node in failed:
                continue
            val, real = node.meta["val"], values[node]
            # The program expects the layout the graph was traced with; one
            # that overlaps itself (an expand) cannot be written: left unfolded.
            if real.stride() != val.stride() or real.storage_offset() != val.storage_offset():
                if torch._debug_has_internal_overlap(val) != 0:
                    continue
                real = torch.empty_strided(val.shape, val.stride(), dtype=val.dtype, device=real.device).copy_(real)
            folded_values[node] = real
    frontier = [n for n in frontier if n in folded_values]
    if not frontier:
        return gm, 0

    graph = torch.fx.Graph()
    mapping = {}
    graph.output(graph.graph_copy(gm.graph, mapping))
    folded = _Folded(graph, gm)
    before = len(graph.nodes)
    for i, node in enumerate(frontier):
        name = f"_folded_constant_{i}"
        folded.register_buffer(name, folded_values[node], persistent=False)
        copy = mapping[node]
        with folded.graph.inserting_before(copy):
            attr = folded.graph.get_attr(name)
        attr.meta = dict(copy.meta)
        copy.replace_all_uses_with(attr)
    folded.graph.eliminate_dead_code()
    removed = before + len(frontier) - len(folded.graph.nodes)
    return folded, removed
