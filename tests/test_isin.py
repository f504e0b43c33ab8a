"""isin(elements, test_elements) on neuron: the direct kernel for a few test
values (csrc/aten/native/Isin.cpp) against PyTorch on CPU, over dtypes, NaN
and signed zeros, invert, shapes and elements split between threads, and the
cases left to the boxed fallback (promotion, many test values, non-contiguous
elements); Transformers' stopping criteria as a user's generate() runs them."""
import pytest
import torch
import torchneuron

D = "neuron"


def kernel_runs():
    return torchneuron.executed_ops().get("aten::isin.Tensor_Tensor", {}).get("kernel", 0)


def check(elements, tests, invert=False, direct=True):
    before = kernel_runs()
    got = torch.isin(elements.to(D), tests.to(D), invert=invert)
    want = torch.isin(elements, tests, invert=invert)
    assert got.device.type == D and got.dtype == torch.bool and got.shape == want.shape
    assert torch.equal(got.cpu(), want)
    assert kernel_runs() == before + (1 if direct else 0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8,
                                   torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("invert", [False, True])
def test_isin_equals_cpu(dtype, invert):
    g = torch.Generator().manual_seed(0)
    elements = torch.randint(0, 20, (7, 13), generator=g).to(dtype)
    tests = torch.tensor([3, 11, 0]).to(dtype)
    check(elements, tests, invert)


def test_isin_nan_and_signed_zeros():
    elements = torch.tensor([1.0, float("nan"), -0.0, 0.0, float("inf")])
    check(elements, torch.tensor([float("nan"), 0.0, float("inf")]))


@pytest.mark.parametrize("shape", [(), (0,), (1,), (16000,), (3, 50001)])
def test_isin_shapes_and_threads(shape):
    g = torch.Generator().manual_seed(1)
    elements = torch.randint(0, 100, shape, generator=g)
    check(elements, torch.tensor([5, 99, 42, 7]))
    check(elements, torch.tensor([], dtype=torch.int64))  # nothing is in an empty set


@pytest.mark.parametrize("case", ["promotion", "many_test_values", "non_contiguous"])
def test_isin_fallback_cases_equal_cpu(case):
    elements = torch.arange(40).view(5, 8)
    tests = torch.tensor([3, 17, 39])
    if case == "promotion":
        tests = tests.float() + 0.5
    elif case == "many_test_values":
        tests = torch.arange(0, 80, 3)
    else:
        elements = elements.t()
    check(elements, tests, direct=False)


def test_isin_of_bools_is_refused_as_on_cpu():
    with pytest.raises(RuntimeError) as cpu_error:
        torch.isin(torch.tensor([True, False]), torch.tensor([True]))
    with pytest.raises(RuntimeError) as dev_error:
        torch.isin(torch.tensor([True, False], device=D), torch.tensor([True], device=D))
    assert str(cpu_error.value) in str(dev_error.value)


def test_isin_on_two_devices_is_refused_and_the_device_keeps_working():
    with pytest.raises(RuntimeError, match="device"):
        torch.isin(torch.arange(5, device=D), torch.tensor([1]))
    check(torch.arange(5), torch.tensor([1]))


def test_generate_stops_at_eos_as_on_cpu():
    # EosTokenCriteria and the min-new-tokens processor call isin every step
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, eos_token_id=5, pad_token_id=0)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([[1, 9, 17, 33]])
    with torch.no_grad():
        # the model's most likely token after the prompt becomes the end-of-sequence id
        first = model(ids).logits[0, -1].argmax().item()
        model.generation_config.eos_token_id = first
        kwargs = dict(max_new_tokens=6, min_new_tokens=2, do_sample=False)
        want = model.generate(ids, **kwargs)
        got = model.to(D).generate(ids.to(D), **kwargs)
    assert torch.equal(got.cpu(), want)
