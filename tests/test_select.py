"""where(condition, self, other) and masked_fill_(mask, value) on neuron: the
direct selection kernels (csrc/aten/native/Select.cpp) against PyTorch on
CPU, bit for bit (NaN, -0.0 and infinities included), over broadcasting,
0-dim operands, every element size, runs split between threads, and the
cases left to the boxed fallback (promotion, non-contiguous operands,
complex values); errors as CPU raises them."""
import pytest
import torch
import torchneuron

D = "neuron"

BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def same_bits(dev, cpu):
    assert dev.device.type == D and dev.dtype == cpu.dtype and dev.shape == cpu.shape
    assert dev.stride() == cpu.stride() or cpu.numel() <= 1, (dev.stride(), cpu.stride())
    got = dev.cpu()
    if cpu.dtype.is_floating_point:
        got, cpu = got.view(BITS[cpu.element_size()]), cpu.view(BITS[cpu.element_size()])
    assert torch.equal(got, cpu)


def values(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        x = torch.randn(shape, generator=g).to(dtype)
        if dtype.is_floating_point and x.numel() >= 4:
            flat = x.view(-1)
            flat[:4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")]).to(dtype)
        return x
    return torch.randint(-100, 100, shape, generator=g).to(dtype)


def kernel_runs(op):
    return torchneuron.executed_ops().get(op, {}).get("kernel", 0)


# (condition, self, other) shapes: broadcasting as Hugging Face's masks and
# logits processors use it, 0-dim operands, a shape no operand has, empty.
SHAPES = {
    "same": ((5, 7), (5, 7), (5, 7)),
    "vocab_mask": ((16,), (), (3, 16)),  # torch.where(eos_mask, -inf, scores)
    "scalar_other": ((3, 16), (3, 16), ()),
    "attention_mask": ((2, 1, 1, 9), (2, 4, 3, 9), ()),
    "outer": ((4, 1), (1, 5), (5,)),
    "all_0dim": ((), (), ()),
    "empty": ((0, 3), (0, 3), (3,)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64,
                                   torch.int64, torch.int8, torch.bool])
@pytest.mark.parametrize("case", list(SHAPES))
def test_where_equals_cpu_bit_for_bit(case, dtype):
    cs, ss, os_ = SHAPES[case]
    cond, a, b = values(cs, torch.bool, 1), values(ss, dtype, 2), values(os_, dtype, 3)
    before = kernel_runs("aten::where.self")
    same_bits(torch.where(cond.to(D), a.to(D), b.to(D)), torch.where(cond, a, b))
    assert kernel_runs("aten::where.self") == before + 1


def test_where_with_python_scalars_as_transformers_writes_it():
    scores = values((4, 100), torch.bfloat16, 4)
    mask = values((100,), torch.bool, 5)
    same_bits(torch.where(mask.to(D), -float("inf"), scores.to(D)), torch.where(mask, -float("inf"), scores))
    same_bits(torch.where(mask.to(D), scores.to(D), 0.0), torch.where(mask, scores, 0.0))


def test_where_split_between_threads_mid_row():
    # 3 x 50001 elements: the threads' ranges of 16384 elements start and end
    # inside rows; other broadcasts along the rows (innermost stride 0)
    cond, a, b = values((50001,), torch.bool, 6), values((3, 50001), torch.float32, 7), values((3, 1), torch.float32, 8)
    same_bits(torch.where(cond.to(D), a.to(D), b.to(D)), torch.where(cond, a, b))


@pytest.mark.parametrize("case", ["promotion", "transposed", "complex"])
def test_where_fallback_cases_equal_cpu(case):
    cond = values((6, 5), torch.bool, 9)
    a, b = values((6, 5), torch.float32, 10), values((6, 5), torch.float32, 11)
    if case == "promotion":
        b = b.to(torch.bfloat16)
    elif case == "transposed":
        a = values((5, 6), torch.float32, 12).t()
    else:
        a, b = values((6, 5), torch.complex64, 13), values((6, 5), torch.complex64, 14)
    before = kernel_runs("aten::where.self")
    got = torch.where(cond.to(D), a.to(D), b.to(D))
    want = torch.where(cond, a, b)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
    assert kernel_runs("aten::where.self") == before  # the fallback ran it


def test_where_gradients_equal_cpu():
    cond = values((4, 6), torch.bool, 15)
    a, b = values((4, 6), torch.float32, 16).nan_to_num(), values((6,), torch.float32, 17).nan_to_num()
    grads = []
    for device in ("cpu", D):
        x, y = a.to(device).detach().requires_grad_(), b.to(device).detach().requires_grad_()
        (torch.where(cond.to(device), x, y) * torch.arange(24.0, device=device).view(4, 6)).sum().backward()
        grads.append((x.grad.cpu(), y.grad.cpu()))
    assert all(torch.equal(g, c) for g, c in zip(grads[1], grads[0]))


@pytest.mark.parametrize("bad", ["shapes", "float_condition", "cpu_condition"])
def test_where_errors_as_cpu_and_the_device_keeps_working(bad):
    cond, a, b = values((3, 4), torch.bool, 18), values((3, 4), torch.float32, 19), values((3, 4), torch.float32, 20)
    if bad == "shapes":
        b = values((5,), torch.float32, 21)
    elif bad == "float_condition":
        cond = cond.float()
    with pytest.raises(RuntimeError) as cpu_error:
        if bad == "cpu_condition":
            raise RuntimeError("Expected all tensors to be on the same device")
        torch.where(cond, a, b)
    with pytest.raises(RuntimeError) as dev_error:
        torch.where(cond if bad == "cpu_condition" else cond.to(D), a.to(D), b.to(D))
    assert str(cpu_error.value).split("\n")[0] in str(dev_error.value) or bad == "cpu_condition"
    if bad == "cpu_condition":
        assert "device" in str(dev_error.value), dev_error.value
    good = torch.where(cond.bool().to(D), a.to(D), 0.0)
    assert torch.equal(good.cpu(), torch.where(cond.bool(), a, 0.0))


MASKS = {
    "same": (4, 7),
    "rows": (7,),
    "column": (4, 1),
    "0dim": (),
}


@pytest.mark.parametrize("dtype,value", [(torch.float32, -float("inf")), (torch.bfloat16, 0.25),
                                         (torch.float16, float("nan")), (torch.int64, 7), (torch.int8, -3),
                                         (torch.bool, True), (torch.float32, 3)])
@pytest.mark.parametrize("mask_shape", list(MASKS))
def test_masked_fill_equals_cpu_bit_for_bit(mask_shape, dtype, value):
    x, mask = values((4, 7), dtype, 22), values(MASKS[mask_shape], torch.bool, 23)
    dev = x.to(D)
    before = kernel_runs("aten::masked_fill_.Scalar")
    out = dev.masked_fill_(mask.to(D), value)
    assert out is dev
    same_bits(dev, x.clone().masked_fill_(mask, value))
    assert kernel_runs("aten::masked_fill_.Scalar") == before + 1
    same_bits(x.to(D).masked_fill(mask.to(D), value), x.masked_fill(mask, value))  # functional form


def test_masked_fill_large_and_fallback_cases():
    x, mask = values((3, 50001), torch.bfloat16, 24), values((50001,), torch.bool, 25)
    same_bits(x.to(D).masked_fill_(mask.to(D), -1.5), x.clone().masked_fill_(mask, -1.5))
    before = kernel_runs("aten::masked_fill_.Scalar")
    t = values((5, 6), torch.float32, 26)
    got = t.to(D).t().masked_fill_(values((6, 5), torch.bool, 27).to(D), 2.0)  # non-contiguous self
    want = t.t().clone().masked_fill_(values((6, 5), torch.bool, 27), 2.0)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)
    flags = values((8,), torch.bool, 28)
    dev = flags.to(D)
    dev.masked_fill_(dev, False)  # the mask is self
    assert not dev.any().item()
    assert kernel_runs("aten::masked_fill_.Scalar") == before  # both ran on the fallback


@pytest.mark.parametrize("bad", ["mask_shape", "mask_dtype", "overflow"])
def test_masked_fill_errors_as_cpu(bad):
    x, mask, value = values((3, 4), torch.int8, 29), values((3, 4), torch.bool, 30), 5
    if bad == "mask_shape":
        mask = values((2, 4), torch.bool, 31)
    elif bad == "mask_dtype":
        mask = mask.float()
    else:
        value = 1000
    with pytest.raises(RuntimeError) as cpu_error:
        x.clone().masked_fill_(mask, value)
    dev = x.to(D)
    with pytest.raises(RuntimeError) as dev_error:
        dev.masked_fill_(mask.to(D), value)
        dev.cpu()
    assert str(cpu_error.value).split("\n")[0] in str(dev_error.value)
    assert torch.equal(dev.cpu(), x)  # left untouched
