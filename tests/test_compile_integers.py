"""Integer work inside compiled programs: exact integer arithmetic and input updates
(a KV cache's positions), and the integer histc of mixture-of-experts layers."""
import pytest
import torch

import torchneuron

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def records():
    return torchneuron.compile_metrics()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_arithmetic_in_a_program_is_exact(dtype):
    """Integer add/sub and integer input updates (a KV cache's position and fill
    level) run exactly, beyond float32's 24 bits, with broadcasting and wrap-around."""
    info = torch.iinfo(dtype)
    x = torch.tensor([[0, 1, -7], [info.max, (1 << 24) + 1, info.min]], dtype=dtype)
    length = torch.tensor((1 << 24) + 3 if dtype == torch.int32 else (1 << 53) + 1, dtype=dtype)

    def fn(x, length):
        pos = x + length * 3 - 1
        length.add_(1)
        return pos, x.clone()

    neuron_length = length.to("neuron")
    pos, clone = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"), neuron_length)
    want_length = length.clone()
    want_pos, want_clone = fn(x, want_length)
    assert torch.equal(pos.cpu(), want_pos) and torch.equal(clone.cpu(), want_clone)
    assert torch.equal(neuron_length.cpu(), want_length)
    program = records()[-1]["programs"]["inference"]
    assert program["executor"] == "compiler"
    assert not any(op.startswith(("aten::add", "aten::sub", "aten::copy_")) for op in program["extern_ops"]), \
        program["extern_ops"]


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_histc_in_a_program_equals_eager(dtype):
    """Transformers' mixture-of-experts layers count tokens per expert with an
    integer histc off CPU; a program runs it as the device's eager op does."""
    x = torch.randint(-1, 9, (200,), generator=torch.Generator().manual_seed(3)).to(dtype)
    fn = lambda t: torch.histc(t, bins=8, min=0, max=7)  # noqa: E731
    got = torch.compile(fn, backend="neuron", fullgraph=True)(x.to("neuron"))
    assert records()[-1]["programs"]["inference"]["executor"] == "compiler"
    want = torch.histc(x.double(), bins=8, min=0, max=7).to(dtype)  # CPU's kernel takes floating types only
    assert got.dtype == dtype
    torch.testing.assert_close(got.cpu(), want)
