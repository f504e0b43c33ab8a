"""In-place updates of part of a buffer under torch.compile(backend="neuron"), as
AOTAutograd functionalizes them (compiler/include/neuroncompiler/simplify.hpp): TRL's
chunked LM head writes each logits tile into a slice of a wider chunk buffer, reads it
back through slices, sums float32 tiles with `dtype=torch.float32`. Each result equals
eager and CPU, and the program has no scatter copying the tile into the buffer, no sum
left out of its fused group."""

import pytest
import torch

import torchneuron

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _softmax_in_a_tile(a, b, t):
    buf = torch.empty(a.shape[0], b.shape[1] + 8, device=a.device)  # wider than the tile, as TRL's mm_buf
    tile = buf[:, : b.shape[1]]
    tile.copy_(a @ b)
    e = torch.exp(tile - tile.amax(-1, keepdim=True))
    s = e.sum(-1, dtype=torch.float32)
    tile.copy_(e / s[:, None])  # the tile rewritten in place, then read transposed
    return tile.t() @ t, (e * tile).sum(-1, dtype=torch.float32)


def test_a_tile_written_into_a_wider_buffer_is_read_where_it_was_computed():
    """Functionalized, `tile.copy_(x)` on a slice of `buf` is a slice_scatter of x into
    `buf`, and later reads of the tile (and of its transpose) are views of the scatter's
    result. The compiler reads x there instead: no scatter copies a tile, and the sums
    with dtype=float32 join the groups computing their terms."""
    compiled = torch.compile(_softmax_in_a_tile, backend="neuron", fullgraph=True)
    torch.manual_seed(0)
    args = (torch.randn(40, 24), torch.randn(24, 56), torch.randn(40, 16))
    dev = [t.to("neuron") for t in args]
    for got, eager, cpu in zip(compiled(*dev), _softmax_in_a_tile(*dev), _softmax_in_a_tile(*args)):
        torch.testing.assert_close(got.cpu(), eager.cpu(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got.cpu(), cpu, rtol=1e-5, atol=1e-6)
    program = torchneuron.compile_metrics()[-1]["programs"]["inference"]
    assert program["executor"] == "compiler", program
    ops = program["extern_ops"]
    assert "aten::slice_scatter.default" not in ops and "aten::sum.dim_IntList" not in ops, ops
    assert ops.get("aten::mm.default") == 2, ops
