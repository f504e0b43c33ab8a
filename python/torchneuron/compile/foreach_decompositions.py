"""Elementwise foreach ops, decomposed per tensor for the graph compiler.

A compiled optimizer step (`torch.compile(opt.step)`) reaches AOTAutograd as
PyTorch's foreach ops (`_foreach_mul`, `_foreach_addcmul`, `_foreach_sqrt`,
...), functionalized: each returns a new list. Kept whole, each is an extern
call writing a fresh list, and a step streams every parameter's state through
memory a dozen times. Decomposed into the element op per tensor
(`_foreach_mul.Scalar(xs, s)` -> `mul.Scalar(x, s)` for each x), a
parameter's update becomes a chain of elementwise nodes of one shape, which
the compiler fuses into one group that reads its state once and writes it
back in place, as Inductor does with its own foreach lowering.

The element op of a foreach overload is found by its schema: the overload of
`aten.<name>` whose arguments take, in order, a Tensor for each Tensor[], a
Scalar for each Scalar[] and the same type for every other argument (any more
arguments have defaults). Only elementwise ops (the list below) decompose;
reductions (`_foreach_norm`, `_foreach_max`) and overloads without such an
element op (a tensor of per-tensor scalars) stay whole.
"""
import functools

import torch

aten = torch.ops.aten

ELEMENTWISE = (
    "abs", "add", "addcdiv", "addcmul", "ceil", "clamp_max", "clamp_min", "cos", "div", "erf", "erfc", "exp",
    "expm1", "floor", "frac", "lerp", "log", "log10", "log1p", "log2", "maximum", "minimum", "mul", "neg", "pow",
    "reciprocal", "round", "rsqrt", "sigmoid", "sign", "sin", "sqrt", "sub", "tanh", "trunc",
)

_PER_TENSOR = {"List[Tensor]": "Tensor", "List[number]": "number"}


def _writes(schema) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _element_overload(foreach_op):
    """(element overload, per-tensor flags, element argument names) of a
    functional foreach overload, or None."""
    schema = foreach_op._schema
    if len(schema.returns) != 1 or str(schema.returns[0].type) != "List[Tensor]" or _writes(schema):
        return None
    if not any(str(a.type) == "List[Tensor]" for a in schema.arguments):
        return None
    want = [_PER_TENSOR.get(str(a.type), str(a.type)) for a in schema.arguments]
    per_tensor = [str(a.type) in _PER_TENSOR for a in schema.arguments]
    packet = getattr(aten, schema.name.removeprefix("aten::_foreach_"))
    for name in packet.overloads():
        candidate = getattr(packet, name)
        cschema = candidate._schema
        args = cschema.arguments
        if _writes(cschema) or len(args) < len(want) or [str(a.type) for a in args[:len(want)]] != want:
            continue
        if not all(a.has_default_value() for a in args[len(want):]):
            continue
        if len(cschema.returns) != 1 or str(cschema.returns[0].type) != "Tensor":
            continue
        return candidate, per_tensor, [a.name for a in args[:len(want)]]
    return None


def _decomposition(foreach_op, element, per_tensor, element_names):
    names = [a.name for a in foreach_op._schema.arguments]
    defaults = {a.name: a.default_value for a in foreach_op._schema.arguments if a.has_default_value()}

    def per_tensor_op(*args, **kwargs):
        values = dict(defaults)
        values.update(zip(names, args))
        values.update(kwargs)
        count = next(len(values[n]) for n, each in zip(names, per_tensor) if each)
        return [element(**{e: (values[n][i] if each else values[n])
                           for n, e, each in zip(names, element_names, per_tensor) if n in values})
                for i in range(count)]

    return per_tensor_op


@functools.cache
def foreach_decompositions() -> dict:
    """{functional foreach overload: its per-tensor decomposition}."""
    table = {}
    for base in ELEMENTWISE:
        packet = getattr(aten, f"_foreach_{base}", None)
        if packet is None:
            continue
        for name in packet.overloads():
            op = getattr(packet, name)
            found = _element_overload(op)
            if found is not None:
                table[op] = _decomposition(op, *found)
    return table
