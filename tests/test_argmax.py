"""argmax on neuron: the direct kernel for the last dimension of contiguous
float32, bfloat16 and float16 tensors (csrc/aten/native/Argmax.cpp) against
PyTorch on CPU, over NaN, infinities, ties and signed zeros, row lengths
around the kernel's 16 lanes, rows split between threads, keepdim; the cases
left to the boxed fallback; errors; greedy decoding as a user's generate()
runs it."""
import pytest
import torch
import torchneuron

D = "neuron"
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def kernel_runs():
    return torchneuron.executed_ops().get("aten::argmax", {}).get("kernel", 0)


def check(x, dim=-1, keepdim=False, direct=True):
    before = kernel_runs()
    got = torch.argmax(x.to(D), dim=dim, keepdim=keepdim)
    want = torch.argmax(x, dim=dim, keepdim=keepdim)
    assert got.device.type == D and got.dtype == torch.int64 and got.shape == want.shape
    assert torch.equal(got.cpu(), want), (got.cpu(), want)
    assert kernel_runs() == before + (1 if direct else 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 1000, 16001])
def test_argmax_of_each_row_equals_cpu(dtype, n):
    g = torch.Generator().manual_seed(n)
    check(torch.randn(3, n, generator=g).to(dtype))
    check(torch.randn(2, 3, n, generator=g).to(dtype), keepdim=True)
    check(torch.randn(n, generator=g).to(dtype), dim=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_infinities_ties_and_signed_zeros(dtype):
    nan, inf = float("nan"), float("inf")
    rows = [
        [1.0, nan, 3.0, nan],            # the first NaN
        [-inf, -inf, -inf],               # all -inf: index 0
        [2.0, inf, 5.0, inf],             # the first +inf
        [-0.0, 0.0, -1.0],                # 0.0 and -0.0 tie: the first
        [0.0, -0.0, -1.0],
        [4.0] * 20 + [5.0] + [5.0] * 3,   # ties past a block: the first
        [-1.0] * 40 + [nan],              # a NaN in the tail after whole blocks
    ]
    for row in rows:
        check(torch.tensor([row]).to(dtype))
    # Every position of the maximum, around the 16-lane blocks.
    for pos in range(40):
        x = torch.zeros(1, 40, dtype=dtype)
        x[0, pos] = 1
        check(x)


def test_rows_split_between_threads():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4099, generator=g).bfloat16()
    x[5, 4098] = 100.0  # the last element of a row
    x[40, 0] = float("nan")
    check(x)
    check(torch.randn(8, 152064, generator=g))  # a large vocabulary


@pytest.mark.parametrize("case", ["dim_none", "dim_0", "transposed", "int64", "float64_refused_elsewhere"])
def test_other_cases_take_the_fallback_and_equal_cpu(case):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 7, generator=g)
    if case == "dim_none":
        before = kernel_runs()
        assert torch.argmax(x.to(D)).item() == torch.argmax(x).item()
        assert kernel_runs() == before
    elif case == "dim_0":
        check(x, dim=0, direct=False)
    elif case == "transposed":
        check(x.t(), dim=-1, direct=False)  # a non-contiguous view: to the device, then transposed there
    elif case == "int64":
        check(torch.randint(-5, 5, (4, 9), generator=g), direct=False)
    else:
        check(x.to(torch.int8), direct=False)


def test_a_non_contiguous_device_view_goes_to_the_fallback():
    x = torch.randn(6, 10)
    before = kernel_runs()
    got = torch.argmax(x.to(D).t(), dim=-1)
    assert torch.equal(got.cpu(), torch.argmax(x.t(), dim=-1))
    assert kernel_runs() == before


@pytest.mark.parametrize("call", [
    lambda d: torch.argmax(torch.empty(3, 0, device=d), dim=-1),  # an empty row
    lambda d: torch.argmax(torch.ones(2, 3, device=d), dim=2),     # no such dimension
], ids=["empty_row", "bad_dim"])
def test_errors_are_cpus_and_the_device_keeps_working(call):
    with pytest.raises(Exception) as on_cpu:
        call("cpu")
    with pytest.raises(type(on_cpu.value)) as on_device:
        call(D)
    assert str(on_cpu.value) in str(on_device.value)
    assert torch.argmax(torch.tensor([[1.0, 3.0, 2.0]], device=D), dim=-1).item() == 1


def test_greedy_decoding_chooses_cpus_tokens():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(3, 300, (2, 6), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    want = model.generate(ids, **kw)
    before = kernel_runs()
    got = model.to(D).generate(ids.to(D), **kw)
    assert torch.equal(got.cpu(), want)
    assert kernel_runs() >= before + 8  # one argmax per new token
