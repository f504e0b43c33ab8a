"""Constant folding in torch.compile(backend="neuron") (python/torchneuron/compile/constants.py):
what depends on no graph input is computed once at compile time; random ops never are;
a constant whose evaluation fails is left to the program, which reports it at its step."""

import pytest
import torch

import torchneuron

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def records():
    return torchneuron.compile_metrics()


def test_constant_subgraphs_are_folded_once():
    """What depends on no input (a causal mask made from aranges, as Transformers
    builds one) is computed at compile time and read by the program as a constant."""
    def fn(x):
        pos = torch.arange(x.shape[-1], device=x.device)
        mask = (pos[None, :] <= pos[:, None]) & (pos[:, None] - pos[None, :] < 3)
        return torch.where(mask, x, 0.0) * 2

    x = torch.randn(6, 6)
    got = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), fn(x))
    program = records()[-1]["programs"]["inference"]
    assert program["executor"] == "compiler"
    assert program["constant_folded"] >= 5
    assert not any(op.startswith(("aten::arange", "aten::le", "aten::lt", "aten::bitwise_and"))
                   for op in program["extern_ops"]), program["extern_ops"]


def test_folded_constants_are_not_shared_through_the_program_cache():
    """Two graphs that differ only in a folded constant have the same program text
    (the cache key); each call still reads its own constant."""
    def one(x):
        return x + torch.arange(4, device=x.device) * 1.0

    def two(x):
        return x + torch.arange(4, device=x.device) * 2.0

    x = torch.zeros(4)
    a = torch.compile(one, backend="neuron", fullgraph=True)(x.to("neuron")).cpu()
    b = torch.compile(two, backend="neuron", fullgraph=True)(x.to("neuron")).cpu()
    torch.testing.assert_close(a, one(x))
    torch.testing.assert_close(b, two(x))
    assert [r["programs"]["inference"]["cache"] for r in records()] == ["miss", "memory"]


def test_random_ops_are_never_folded():
    """Dropout of a constant depends on no input, and draws anew every call."""
    def fn(x):
        return x + torch.nn.functional.dropout(torch.ones(64, device=x.device), 0.5, training=True)

    compiled = torch.compile(fn, backend="neuron", fullgraph=True)
    x = torch.zeros(64, device="neuron")
    first, second = compiled(x).cpu(), compiled(x).cpu()
    assert not torch.equal(first, second)
    program = records()[-1]["programs"]["inference"]
    assert program["executor"] == "compiler" and program["constant_folded"] == 0


def test_a_constant_that_fails_to_evaluate_is_left_to_the_program():
    """An out-of-range index into a constant: folding it raises, so the nodes stay
    in the program, whose step raises the eager error naming the op when it runs;
    the process keeps working."""
    def fn(x):
        table = torch.arange(4, device=x.device)
        index = torch.full((1,), 5, dtype=torch.long, device=x.device)
        return x + table[index]

    compiled = torch.compile(fn, backend="neuron", fullgraph=True)
    with pytest.raises(Exception, match=r"in compiled program step \d+ \(extern call aten::index"):
        compiled(torch.zeros(1, device="neuron")).cpu()
    program = records()[-1]["programs"]["inference"]
    assert program["executor"] == "compiler" and program["constant_folded"] == 0
    assert torch.equal((torch.ones(2, device="neuron") * 3).cpu(), torch.full((2,), 3.0))


def _accumulate_whole(a, b, e):
    acc = torch.zeros(a.shape[0], b.shape[1], device=a.device)
    acc[: a.shape[0]].addmm_(a, b)  # TRL's fused LM head accumulates its gradients so
    return acc + e, acc.sum(0)


def _accumulate_rows(a, b, e):
    acc = torch.zeros(a.shape[0] + 2, b.shape[1], device=a.device)
    acc[1: a.shape[0] + 1].addmm_(a, b)
    return acc[1:-1] + e, acc.sum(0)


@pytest.mark.parametrize("fn, groups", [(_accumulate_whole, 1), (_accumulate_rows, 3)], ids=["whole", "rows"])
def test_a_product_into_zeros_is_the_product_alone(fn, groups):
    """`acc = zeros(); acc[:n].addmm_(a, b)`: AOTAutograd writes a zero fill, an addmm of
    a view of it and a slice_scatter back into it. The view of the fill is not folded into
    a constant (it would hide the zeros from the compiler): the program runs the product
    alone (mm, no fill to read or copy first), and a scatter over the whole fill is its
    source (no copy: the add is the one fused group). Scattered into some rows of a
    larger fill, the fill and the copy into its rows stay (fused groups, the copy in
    place). Equal to eager and to CPU."""
    compiled = torch.compile(fn, backend="neuron", fullgraph=True)
    torch.manual_seed(0)
    args = (torch.randn(40, 24), torch.randn(24, 16), torch.randn(40, 16))
    dev = [t.to("neuron") for t in args]
    for got, eager, cpu in zip(compiled(*dev), fn(*dev), fn(*args)):
        torch.testing.assert_close(got.cpu(), eager.cpu(), rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got.cpu(), cpu, rtol=1e-5, atol=1e-5)
    program = records()[-1]["programs"]["inference"]
    assert program["executor"] == "compiler" and program["constant_folded"] == 0, program
    ops = program["extern_ops"]
    assert ops.get("aten::mm.default") == 1 and "aten::addmm.default" not in ops, ops
    assert "aten::slice_scatter.default" not in ops and program["fused_groups"] == groups, program
