"""torch.autocast(device_type="neuron"): PyTorch's standard op policy (the
lists CUDA uses) for bfloat16 and float16, compared with CPU."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

D = "neuron"
LOW = [torch.bfloat16, torch.float16]


def test_supported_dtypes():
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.neuron.is_bf16_supported()
    assert torch.amp.is_autocast_available(D)


@pytest.mark.parametrize("dtype", LOW)
def test_autocast_state(dtype):
    assert not torch.is_autocast_enabled(D)
    with torch.autocast(device_type=D, dtype=dtype):
        assert torch.is_autocast_enabled(D)
        assert torch.get_autocast_dtype(D) == dtype
        assert not torch.is_autocast_enabled("cpu")
        with torch.autocast(device_type=D, enabled=False):
            assert not torch.is_autocast_enabled(D)
            x = torch.randn(3, 3, device=D)
            assert (x @ x).dtype == torch.float32
    assert not torch.is_autocast_enabled(D)


def test_unsupported_autocast_dtype_warns_and_disables():
    with pytest.warns(UserWarning, match="neuron Autocast only supports dtypes of torch.bfloat16, "
                                         "torch.float16"):
        with torch.autocast(device_type=D, dtype=torch.float64):
            assert not torch.is_autocast_enabled(D)
            x = torch.randn(2, 2, device=D)
            assert (x @ x).dtype == torch.float32


def _inputs():
    g = torch.Generator().manual_seed(0)
    return {
        "a": torch.randn(6, 8, generator=g),
        "b": torch.randn(8, 5, generator=g),
        "w": torch.randn(5, 8, generator=g),
        "bias": torch.randn(5, generator=g),
        "batch": torch.randn(2, 6, 8, generator=g),
        "batch2": torch.randn(2, 8, 4, generator=g),
        "filters": torch.randn(4, 6, 3, generator=g),
    }


# Ops cast to the low-precision dtype (PyTorch's lower_precision_fp list).
LOWER = {
    "mm": lambda t: torch.mm(t["a"], t["b"]),
    "matmul": lambda t: t["a"] @ t["b"],
    "linear": lambda t: F.linear(t["a"], t["w"], t["bias"]),
    "addmm": lambda t: torch.addmm(t["bias"][:1], t["a"], t["b"]),
    "bmm": lambda t: torch.bmm(t["batch"], t["batch2"]),
    "baddbmm": lambda t: torch.baddbmm(torch.full((2, 6, 4), 0.5, device=t["a"].device,
                                                  dtype=t["a"].dtype), t["batch"], t["batch2"]),
    "conv1d": lambda t: F.conv1d(t["batch"], t["filters"], padding=1),
    "sdpa": lambda t: F.scaled_dot_product_attention(t["batch"][None], t["batch"][None],
                                                     t["batch"][None]),
}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("op", sorted(LOWER))
def test_lower_precision_ops(op, dtype):
    cpu = _inputs()
    dev = {k: v.to(D) for k, v in cpu.items()}
    with torch.autocast(device_type=D, dtype=dtype):
        got = LOWER[op](dev)
    assert got.dtype == dtype
    assert got.device.type == D
    # the same computation in the low dtype on CPU: same kernels, same result
    # (attention: neuron takes PyTorch's math path, CPU would pick its flash kernel)
    with sdpa_kernel(SDPBackend.MATH):
        ref = LOWER[op]({k: v.to(dtype) for k, v in cpu.items()})
    torch.testing.assert_close(got.cpu(), ref)
    # and close to the float32 result at the dtype's precision
    full = LOWER[op](cpu)
    torch.testing.assert_close(got.cpu().float(), full, atol=0.1, rtol=0.05)


# Ops that autocast runs in float32 even on low-precision inputs (PyTorch's
# fp32 and fp32_set_opt_dtype lists), and ones that promote mixed inputs.
FP32 = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: F.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],)),
    "group_norm": lambda x: F.group_norm(x, 2),
    "exp": lambda x: torch.exp(x),
    "log1p": lambda x: torch.log1p(x.abs()),
    "pow": lambda x: torch.pow(x, 2),
    "sum": lambda x: torch.sum(x),
    "cumsum": lambda x: torch.cumsum(x, 0),
    "prod": lambda x: torch.prod(x[:2], 0),
    "mse_loss": lambda x: F.mse_loss(x, x.flip(0)),
    "nll_loss": lambda x: F.nll_loss(x, torch.arange(x.shape[0], device=x.device) % 8),
    "l1_loss": lambda x: F.l1_loss(x, x.flip(0)),
    "norm": lambda x: torch.linalg.vector_norm(x),
    "logsumexp": lambda x: torch.logsumexp(x, -1),
    "addcmul": lambda x: torch.addcmul(torch.ones(x.shape, device=x.device), x, x),
}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("op", sorted(FP32))
def test_fp32_ops_stay_fp32(op, dtype):
    cpu = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.autocast(device_type=D, dtype=dtype):
        got = FP32[op](cpu.to(D))
    assert got.dtype == torch.float32, f"{op} gave {got.dtype} under neuron autocast"
    ref = FP32[op](cpu.float())  # the policy: cast the low-precision input up, run in fp32
    torch.testing.assert_close(got.cpu(), ref)


def test_binary_cross_entropy_is_refused_under_autocast():
    x = torch.rand(4, device=D)
    refused = None
    with torch.autocast(device_type=D, dtype=torch.bfloat16):
        try:
            F.binary_cross_entropy(torch.sigmoid(x @ torch.eye(4, device=D)), x)
        except RuntimeError as e:
            refused = e
    try:
        torch.neuron.synchronize()
        later = None
    except RuntimeError as e:  # a refusal missed at the call
        later = e
    assert refused is not None, f"not refused at the call; the next synchronization raised: {later}"
    assert str(refused).startswith(
        "[neuron] torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
        "autocast"), refused
    assert "binary_cross_entropy_with_logits" in str(refused)  # says what to use instead
    assert later is None
    # outside autocast the op runs
    got = F.binary_cross_entropy(torch.sigmoid(x), x)
    torch.testing.assert_close(got.cpu(), F.binary_cross_entropy(torch.sigmoid(x.cpu()), x.cpu()))


@pytest.mark.parametrize("dtype", LOW)
def test_other_ops_keep_input_dtype(dtype):
    x = torch.randn(4, 4, device=D)
    with torch.autocast(device_type=D, dtype=dtype):
        assert torch.relu(x).dtype == torch.float32
        assert torch.relu(x.to(dtype)).dtype == dtype
        assert (x + 1).dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW)
def test_model_close_to_cpu_autocast(dtype):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                                torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    ref_model = model
    neuron_model = copy.deepcopy(model).to(D)
    with torch.autocast(device_type=D, dtype=dtype):
        got = neuron_model(x.to(D))
    with torch.autocast(device_type="cpu", dtype=dtype):
        ref = ref_model(x)
    assert got.dtype == dtype
    assert ref.dtype == dtype
    torch.testing.assert_close(got.cpu(), ref)


@pytest.mark.parametrize("dtype", LOW)
def test_backward_under_autocast(dtype):
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    lin_n = copy.deepcopy(lin).to(D)
    x = torch.randn(5, 8)
    with torch.autocast(device_type=D, dtype=dtype):
        loss_n = lin_n(x.to(D)).float().pow(2).sum()
    loss_n.backward()
    with torch.autocast(device_type="cpu", dtype=dtype):
        loss_c = lin(x).float().pow(2).sum()
    loss_c.backward()
    assert lin_n.weight.grad.dtype == torch.float32
    torch.testing.assert_close(loss_n.cpu(), loss_c)
    torch.testing.assert_close(lin_n.weight.grad.cpu(), lin.weight.grad)
    torch.testing.assert_close(lin_n.bias.grad.cpu(), lin.bias.grad)


def test_grad_scaler():
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    model_n = copy.deepcopy(model).to(D)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_n = torch.optim.SGD(model_n.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    scaler_n = torch.amp.GradScaler(D, init_scale=1024.0)
    x = torch.randn(16, 8)
    for _ in range(3):
        for m, o, s, dev in ((model, opt, scaler, "cpu"), (model_n, opt_n, scaler_n, D)):
            with torch.autocast(device_type=dev, dtype=torch.bfloat16):
                loss = m(x.to(dev)).float().pow(2).mean()
            s.scale(loss).backward()
            s.step(o)
            s.update()
            o.zero_grad()
    assert scaler_n.get_scale() == scaler.get_scale()
    torch.testing.assert_close(model_n.weight.detach().cpu(), model.weight.detach())
    # an inf gradient skips the step and halves the scale
    before = model_n.weight.detach().cpu().clone()
    with torch.autocast(device_type=D, dtype=torch.bfloat16):
        loss = model_n(torch.full((2, 8), float("inf"), device=D)).float().sum()
    scaler_n.scale(loss).backward()
    scale = scaler_n.get_scale()
    scaler_n.step(opt_n)
    scaler_n.update()
    assert scaler_n.get_scale() == scale / 2
    assert torch.equal(model_n.weight.detach().cpu(), before)


@pytest.mark.parametrize("impl", [{"fused": True}, {"foreach": True}, {"foreach": False}],
                         ids=["fused", "foreach", "for-loop"])
def test_grad_scaler_with_adam_matches_cpu(impl):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    x = torch.randn(16, 8)
    results = {}
    for dev in ("cpu", D):
        m = copy.deepcopy(model).to(dev)
        opt = torch.optim.Adam(m.parameters(), lr=0.01, **impl)
        scaler = torch.amp.GradScaler(dev, init_scale=256.0)
        for _ in range(3):
            with torch.autocast(device_type=dev, dtype=torch.float16):
                loss = m(x.to(dev)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        results[dev] = (m.weight.detach().cpu(), m.bias.detach().cpu(), scaler.get_scale())
    torch.testing.assert_close(results[D][0], results["cpu"][0])
    torch.testing.assert_close(results[D][1], results["cpu"][1])
    assert results[D][2] == results["cpu"][2]


def test_cuda_style_amp_namespace():
    # torch.neuron.amp.autocast / GradScaler, spelled as torch.cuda.amp's.
    import torch.neuron.amp as neuron_amp

    assert neuron_amp is torch.neuron.amp
    m = torch.nn.Linear(4, 4).to(D)
    x = torch.randn(2, 4, device=D)
    with torch.neuron.amp.autocast():
        assert torch.is_autocast_enabled(D)
        y = m(x)
    assert y.dtype == torch.get_autocast_dtype(D)
    with torch.neuron.amp.autocast(dtype=torch.float16):
        assert m(x).dtype == torch.float16
    with torch.neuron.amp.autocast(enabled=False):
        assert m(x).dtype == torch.float32
    scaler = torch.neuron.amp.GradScaler(init_scale=8.0)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler._device == D
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler.scale(m(x).sum()).backward()
    assert torch.equal(m.weight.grad.cpu(), torch.full((4, 4), 8.0) * x.cpu().sum(0))
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 8.0
