"""Matrix products with few rows on neuron: mm and addmm with up to 16 rows
run the device's skinny-matmul kernel (kernels/), everything else the general
path; both against PyTorch on CPU, with the layouts linear layers produce,
bias broadcasts, autograd, bad input, and a decode step of a real model."""
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import torchneuron

D = "neuron"
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def kernel_runs(op):
    return torchneuron.executed_ops().get(op, {}).get("kernel", 0)


def assert_as_close_as_cpu(got, cpu, exact):
    """The device's result is about as close to the float64 result as CPU's:
    both accumulate in float32, in different orders, so neither is the
    reference for the other's last bits."""
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    scale = exact.abs().max().item() if exact.numel() else 0.0
    device_error = (got.double() - exact).abs().max().item() if exact.numel() else 0.0
    cpu_error = (cpu.double() - exact).abs().max().item() if exact.numel() else 0.0
    floor = torch.finfo(got.dtype).eps * scale
    assert device_error <= 2 * cpu_error + floor, (device_error, cpu_error, floor)


def check(fn, *inputs):
    """fn on neuron against fn on CPU and in float64."""
    got = fn(*(t.to(D) for t in inputs)).cpu()
    assert_as_close_as_cpu(got, fn(*inputs), fn(*(t.double() for t in inputs)))


def operands(M, K, N, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(dtype)
    w = torch.randn(N, K, generator=g).to(dtype)  # nn.Linear layout: [out, in]
    b = torch.randn(N, generator=g).to(dtype)
    return x, w, b


def aten_has_bandwidth_gemv(dtype):
    """ATen multiplies one 16-bit row by an nn.Linear weight with its own
    gemv (a dot product per output, at memory bandwidth like the kernel)
    unless oneDNN takes the product; the device then hands the case to ATen."""
    if dtype == torch.float32:
        return False
    supported = (torch.ops.mkldnn._is_mkldnn_bf16_supported() if dtype == torch.bfloat16
                 else torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return not (torch.backends.mkldnn.enabled and supported)


def cpu_has_amx_bf16():
    with open("/proc/cpuinfo") as f:
        return any(line.startswith("flags") and "amx_bf16" in line.split() for line in f)


def aten_has_amx_bf16_gemm():
    """ATen's bfloat16 GEMM runs on AMX tiles (oneDNN on a CPU with AMX-BF16):
    from 4 rows on it is faster than the kernel, so the device hands it those."""
    return (cpu_has_amx_bf16() and torch.backends.mkldnn.enabled
            and torch.ops.mkldnn._is_mkldnn_bf16_supported())


def kernel_takes(M, dtype):
    if M == 1 and aten_has_bandwidth_gemv(dtype):
        return False
    return not (dtype == torch.bfloat16 and M >= 4 and aten_has_amx_bf16_gemm())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 2, 5, 8, 16])
def test_linear_runs_the_kernel_and_matches_cpu(M, dtype):
    x, w, b = operands(M, 200, 70, dtype)
    torchneuron.reset_executed_ops()
    check(F.linear, x, w, b)
    check(F.linear, x, w)
    runs = 1 if kernel_takes(M, dtype) else 0
    assert kernel_runs("aten::addmm") == runs and kernel_runs("aten::mm") == runs, torchneuron.executed_ops()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("onednn", [True, False])
def test_one_16bit_row_goes_to_aten_where_its_gemv_is_as_fast(dtype, onednn):
    """With oneDNN off, ATen's gemv takes every 16-bit row, so the device
    does too; row-major weights (no such gemv in ATen) keep the kernel."""
    x, w, b = operands(1, 200, 70, dtype)
    was = torch.backends.mkldnn.enabled
    # The setter underneath torch.backends.mkldnn.enabled: the attribute is
    # frozen once OpInfo's test harness has run in this process, and flags()
    # would also set TF32 and warn.
    torch._C._set_mkldnn_enabled(onednn)
    try:
        torchneuron.reset_executed_ops()
        check(F.linear, x, w, b)
        expected = 0 if aten_has_bandwidth_gemv(dtype) else 1
        assert kernel_runs("aten::addmm") == expected, torchneuron.executed_ops()
        if not onednn:
            assert expected == 0
        torchneuron.reset_executed_ops()
        check(torch.mm, x, w.t().contiguous())
        assert kernel_runs("aten::mm") == 1, torchneuron.executed_ops()
    finally:
        torch._C._set_mkldnn_enabled(was)


@pytest.mark.parametrize("onednn", [True, False])
def test_bfloat16_rows_go_to_aten_where_it_has_amx(onednn):
    """On a CPU with AMX-BF16, ATen's oneDNN GEMM takes bfloat16 products of
    4 rows and more (faster than the kernel there); with oneDNN off, or on a
    CPU without AMX, the kernel keeps them. Up to 3 rows stay on the kernel."""
    was = torch.backends.mkldnn.enabled
    torch._C._set_mkldnn_enabled(onednn)  # the setter, as in the test above
    try:
        for M in (3, 4, 8):
            x, w, b = operands(M, 200, 70, torch.bfloat16)
            torchneuron.reset_executed_ops()
            check(F.linear, x, w, b)
            expected = 0 if M >= 4 and onednn and cpu_has_amx_bf16() else 1
            assert kernel_runs("aten::addmm") == expected, (M, torchneuron.executed_ops())
    finally:
        torch._C._set_mkldnn_enabled(was)


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_major_weights(dtype):
    # x @ W with W stored [K, N] (GPT-2's Conv1D computes addmm(bias, x, W))
    x, w, b = operands(3, 90, 150, dtype)
    wt = w.t().contiguous()
    torchneuron.reset_executed_ops()
    check(torch.addmm, b, x, wt)
    check(torch.mm, x, wt)
    assert kernel_runs("aten::addmm") == 1 and kernel_runs("aten::mm") == 1


def test_batched_linear_input_folds_into_the_kernel():
    # [batch, 1, hidden] activations of a decode step reach mm as [batch, hidden]
    x, w, b = operands(4, 64, 48, torch.float32)
    x3 = x.view(4, 1, 64)
    torchneuron.reset_executed_ops()
    check(F.linear, x3, w)
    assert kernel_runs("aten::mm") == 1


@pytest.mark.parametrize("bias_shape", [(1, 30), (4, 30), (4, 1), ()])
def test_bias_broadcasts(bias_shape):
    x, w, _ = operands(4, 20, 30, torch.float32)
    bias = torch.randn(bias_shape)
    torchneuron.reset_executed_ops()
    check(torch.addmm, bias, x, w.t())
    assert kernel_runs("aten::addmm") == 1


@pytest.mark.parametrize("case", ["17_rows", "beta_alpha", "strided_x", "strided_w", "float64",
                                  "int64", "empty_rows"])
def test_other_cases_take_the_general_path_correctly(case):
    x, w, b = operands(4, 24, 10, torch.float32)
    mat2 = w.t()
    beta, alpha = 1, 1
    if case == "17_rows":
        x = torch.randn(17, 24)
    elif case == "beta_alpha":
        beta, alpha = 0.5, 2.0
    elif case == "strided_x":
        x = torch.randn(24, 4).t()  # columns of x not contiguous
    elif case == "strided_w":
        mat2 = torch.randn(48, 20)[::2, ::2]  # contiguous along neither dimension
    elif case == "float64":
        x, mat2, b = x.double(), mat2.double(), b.double()
    elif case == "int64":
        x, mat2, b = (torch.randint(-5, 5, t.shape) for t in (x, mat2, b))
    elif case == "empty_rows":
        x = x[:0]
    # the device operands keep the CPU operands' strides (a strided view is viewed again)
    mat2_dev = mat2.to(D) if case != "strided_w" else mat2._base.to(D)[::2, ::2]
    assert mat2_dev.stride() == mat2.stride()
    torchneuron.reset_executed_ops()
    got = torch.addmm(b.to(D), x.to(D), mat2_dev, beta=beta, alpha=alpha).cpu()
    assert kernel_runs("aten::addmm") == 0, torchneuron.executed_ops()
    torch.testing.assert_close(got, torch.addmm(b, x, mat2, beta=beta, alpha=alpha))


def test_empty_inner_dimension_gives_the_bias():
    x, w, b = operands(3, 0, 5, torch.float32)
    got = torch.addmm(b.to(D), x.to(D), w.t().to(D)).cpu()
    torch.testing.assert_close(got, b.expand(3, 5))


def test_nonfinite_values_propagate():
    x, w, b = operands(2, 40, 9, torch.float32)
    x[0, 3], w[5, 7] = float("nan"), float("inf")
    got = F.linear(x.to(D), w.to(D), b.to(D)).cpu()
    torch.testing.assert_close(got, F.linear(x, w, b), equal_nan=True)


def test_inputs_changed_later_do_not_reach_the_queued_product():
    x, w, _ = operands(2, 64, 32, torch.float32)
    xd, wd = x.to(D), w.to(D)
    y = xd @ wd.t()
    xd.zero_()
    wd.fill_(7.0)
    torch.testing.assert_close(y.cpu(), x @ w.t())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_autograd_through_the_kernel(dtype):
    x, w, b = operands(3, 50, 20, dtype)
    grads = {}
    for name, dev, dt in (("cpu", "cpu", dtype), (D, D, dtype), ("exact", "cpu", torch.float64)):
        xs, ws, bs = (t.detach().to(dev, dt).requires_grad_() for t in (x, w, b))
        F.linear(xs, ws, bs).float().square().sum().backward()
        grads[name] = [t.grad.cpu() for t in (xs, ws, bs)]
    for got, cpu, exact in zip(grads[D], grads["cpu"], grads["exact"]):
        assert_as_close_as_cpu(got, cpu, exact)


@pytest.mark.parametrize("case, message", [
    ("shapes", "mat1 and mat2 shapes cannot be multiplied (2x8 and 9x5)"),
    ("dtypes", "expected m1 and m2 to have the same dtype"),
    ("devices", "neuron"),
])
def test_bad_input_is_reported_and_the_device_keeps_working(case, message):
    x, w = torch.randn(2, 8, device=D), torch.randn(5, 8, device=D)
    if case == "shapes":
        w = torch.randn(5, 9, device=D)
    elif case == "dtypes":
        w = w.bfloat16()
    elif case == "devices":
        w = w.cpu()
    with pytest.raises((RuntimeError, TypeError)) as err:
        torch.mm(x, w.t())
    assert message in str(err.value)
    good = torch.ones(1, 4, device=D) @ torch.ones(4, 3, device=D)
    assert good.cpu().tolist() == [[4.0, 4.0, 4.0]]


def test_decode_step_of_a_model_uses_the_kernel():
    transformers = pytest.importorskip("transformers", reason="Hugging Face Transformers is not installed")
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, pad_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    want = model.generate(ids, **kw)
    model.to(D)
    torchneuron.reset_executed_ops()
    got = model.generate(ids.to(D), **kw)
    assert torch.equal(got.cpu(), want)
    # 7 projections per layer and the head, for each of the 5 decode steps
    assert kernel_runs("aten::mm") >= 5 * (2 * 7 + 1), torchneuron.executed_ops().get("aten::mm")


# Float32 products with many rows: oneDNN on AMD CPUs with AVX-512 (ATen's MKL
# runs its AVX2 code there), ATen's MKL elsewhere; TORCHNEURON_FLOAT32_GEMM
# forces either, so both paths are tested on any machine.
_FLOAT32_GEMM_CHECKS = """
    import json, math
    import torch, torchneuron

    def error(got, cpu, exact):
        # the device's error against float64 may be at most twice CPU's (both sum in float32)
        scale = exact.abs().max().item()
        dev = (got.double() - exact).abs().max().item()
        ref = (cpu.double() - exact).abs().max().item()
        return dev <= 2 * ref + torch.finfo(torch.float32).eps * scale, dev, ref

    def row_tile(product, like):
        buffer = torch.full((96, 384), 7.0, device=like.device, dtype=like.dtype)
        product(buffer[:, 32:352])
        return buffer

    g = torch.Generator().manual_seed(0)
    results = {}
    x, w = torch.randn(96, 256, generator=g), torch.randn(320, 256, generator=g)  # 7.9M multiply-adds
    cases = {
        "mm_linear_weight": (lambda x, w, b: torch.mm(x, w.t()), (x, w, None)),
        "mm_contiguous": (lambda x, w, b: torch.mm(x, w.t().contiguous()), (x, w, None)),
        "mm_transposed_x": (lambda x, w, b: torch.mm(x.t().contiguous().t(), w.t()), (x, w, None)),
        "mm_strided": (lambda x, w, b: torch.mm(x[:, ::2], w[:, ::2].t()),
                       (torch.randn(96, 512, generator=g), torch.randn(320, 512, generator=g), None)),
        "addmm_bias_row": (lambda x, w, b: torch.addmm(b, x, w.t()), (x, w, torch.randn(320, generator=g))),
        "addmm_bias_column": (lambda x, w, b: torch.addmm(b, x, w.t()), (x, w, torch.randn(96, 1, generator=g))),
        "addmm_bias_full": (lambda x, w, b: torch.addmm(b, x, w.t(), beta=0.5, alpha=-2.0),
                            (x, w, torch.randn(96, 320, generator=g))),
        "linear": (lambda x, w, b: torch.nn.functional.linear(x, w, b), (x, w, torch.randn(320, generator=g))),
        "mm_out": (lambda x, w, b: torch.mm(x, w.t(), out=torch.empty(96, 320, device=x.device, dtype=x.dtype)), (x, w, None)),
        "addmm_out": (lambda x, w, b: torch.addmm(b, x, w.t(), beta=2.0, out=torch.empty(96, 320, device=x.device, dtype=x.dtype)),
                      (x, w, torch.randn(320, generator=g))),
        "addmm_in_place": (lambda x, w, b: b.clone().addmm_(x, w.t(), beta=0.25, alpha=3.0),
                           (x, w, torch.randn(96, 320, generator=g))),
        # out= a tile of a wider buffer (TRL's chunked LM head): the columns beside it stay as they were
        "mm_out_row_tile": (lambda x, w, b: row_tile(lambda out: torch.mm(x, w.t(), out=out), x), (x, w, None)),
        "addmm_out_row_tile": (lambda x, w, b: row_tile(lambda out: torch.addmm(b, x, w.t(), beta=0.5, out=out), x),
                               (x, w, torch.randn(320, generator=g))),
        # alpha = 0: beta * bias (oneDNN's matmul itself writes nothing then)
        "addmm_alpha0": (lambda x, w, b: torch.addmm(b, x, w.t(), beta=0.5, alpha=0.0),
                         (x, w, torch.randn(96, 320, generator=g))),
        # batches of matrices (eager attention's scores and values); 4.7M multiply-adds and up
        "bmm": (lambda x, w, b: torch.bmm(x, w), (torch.randn(12, 64, 48, generator=g),
                                                  torch.randn(12, 48, 128, generator=g), None)),
        "bmm_transposed_key": (lambda q, k, b: torch.bmm(q, k.transpose(1, 2)),
                               (torch.randn(12, 128, 64, generator=g), torch.randn(12, 128, 64, generator=g), None)),
        "bmm_expanded_batch": (lambda x, w, b: torch.bmm(x, w.expand(12, -1, -1)),
                               (torch.randn(12, 64, 48, generator=g), torch.randn(1, 48, 128, generator=g), None)),
        "baddbmm_broadcast_bias": (lambda x, w, b: torch.baddbmm(b, x, w, beta=0.5, alpha=2.0),
                                   (torch.randn(12, 64, 48, generator=g), torch.randn(12, 48, 128, generator=g),
                                    torch.randn(128, generator=g))),
        "matmul_4d_attention_scores": (lambda q, k, b: torch.matmul(q, k.transpose(-1, -2)),
                                       (torch.randn(2, 6, 128, 64, generator=g),
                                        torch.randn(2, 6, 128, 64, generator=g), None)),
    }
    for name, (fn, args) in cases.items():
        torchneuron.reset_executed_ops()
        got = fn(*(a.to("neuron") if a is not None else None for a in args)).cpu()
        ops = torchneuron.executed_ops()
        kernel = sum(ops.get(op, {}).get("kernel", 0)
                     for op in ("aten::mm", "aten::addmm", "aten::mm.out", "aten::addmm.out", "aten::addmm_",
                                "aten::bmm", "aten::baddbmm"))
        ok, dev, ref = error(got, fn(*args), fn(*(a.double() if a is not None else None for a in args)))
        results[name] = [ok, dev, ref, kernel]

    # beta = 0: the bias is ignored, NaNs included (as ATen does)
    nan_bias = torch.full((320,), float("nan"))
    got = torch.addmm(nan_bias.to("neuron"), x.to("neuron"), w.t().to("neuron"), beta=0).cpu()
    results["beta0_ignores_nan_bias"] = bool(torch.isfinite(got).all()) and torch.allclose(got, x @ w.t(), atol=1e-4)
    # inputs changed after the product was queued do not reach it
    xd, wd = x.to("neuron"), w.t().to("neuron")
    y = torch.mm(xd, wd)
    xd.zero_()
    results["queued_inputs"] = torch.allclose(y.cpu(), x @ w.t(), atol=1e-4)
    # an out= tensor of another shape is resized (ATen's path), one that overlaps an input too
    o = torch.empty(0, device="neuron")
    torch.mm(x.to("neuron"), w.t().to("neuron"), out=o)
    results["out_resized"] = o.shape == (96, 320) and torch.allclose(o.cpu(), x @ w.t(), atol=1e-4)
    # (the overlapping one as CPU computes it: ATen does not guard against the overlap)
    s = torch.randn(256, 256, generator=g)
    sd = s.to("neuron")
    torch.mm(sd, sd.clone(), out=sd)
    torch.mm(s, s.clone(), out=s)
    results["out_overlapping_input"] = torch.allclose(sd.cpu(), s, atol=1e-3)

    # a training step of a linear layer: gradients as CPU's
    torch.manual_seed(1)
    layer = torch.nn.Linear(256, 320)
    dev_layer = torch.nn.Linear(256, 320).to("neuron")
    dev_layer.load_state_dict(layer.state_dict())
    for m, inp in ((layer, x), (dev_layer, x.to("neuron"))):
        m(inp).square().mean().backward()
    exact = torch.nn.Linear(256, 320).double()
    exact.load_state_dict(layer.state_dict())
    exact(x.double()).square().mean().backward()
    results["grad_weight"] = error(dev_layer.weight.grad.cpu(), layer.weight.grad, exact.weight.grad)[0]
    results["grad_bias"] = error(dev_layer.bias.grad.cpu(), layer.bias.grad, exact.bias.grad)[0]

    # eager attention's gradients through batched products, as CPU's
    q, k, v = (torch.randn(12, 128, 64, generator=g) for _ in range(3))
    grads = {}
    for name, dtype, device in (("cpu", torch.float32, "cpu"), ("dev", torch.float32, "neuron"),
                                ("exact", torch.float64, "cpu")):
        leaves = [t.to(device=device, dtype=dtype, copy=True).requires_grad_() for t in (q, k, v)]
        scores = torch.bmm(leaves[0], leaves[1].transpose(1, 2)).softmax(-1)
        torch.bmm(scores, leaves[2]).square().mean().backward()
        grads[name] = [t.grad.cpu() for t in leaves]
    results["bmm_grads"] = all(error(d, c, e)[0] for d, c, e in zip(grads["dev"], grads["cpu"], grads["exact"]))
    # a bad shape: ATen's own message
    messages = []
    for device in ("cpu", "neuron"):
        try:
            torch.bmm(torch.ones(12, 64, 48, device=device), torch.ones(12, 40, 128, device=device))
        except RuntimeError as e:
            messages.append(str(e))
    results["bmm_bad_shape_message"] = len(messages) == 2 and messages[0] in messages[1]

    # a compiled program computes the product as eager does, bit for bit
    torch._dynamo.reset()
    xd = x.to("neuron")
    f = lambda x, w, b: torch.relu(torch.addmm(b, x, w.t()))
    args = (xd, w.to("neuron"), cases["linear"][1][2].to("neuron"))
    results["compiled_equals_eager"] = torch.equal(torch.compile(f, backend="neuron")(*args).cpu(), f(*args).cpu())
    torch._dynamo.reset()
    f = lambda q, k: torch.relu(torch.bmm(q, k.transpose(1, 2)))
    args = (torch.randn(12, 128, 64, generator=g).to("neuron"), torch.randn(12, 128, 64, generator=g).to("neuron"))
    results["compiled_bmm_equals_eager"] = torch.equal(torch.compile(f, backend="neuron")(*args).cpu(), f(*args).cpu())
    print(json.dumps({"library": torchneuron.float32_gemm_library(), "results": results}))
"""


# A float32 product that a bad setting makes fail (its message printed), then
# another op, whose result shows that the process goes on.
_FIRST_PRODUCT_THEN_ANOTHER_OP = """
    import torch, torchneuron
    a = torch.ones(64, 64, device="neuron")
    try:
        torch.mm(a, a)
    except RuntimeError as e:
        print(e)
    print(torch.add(a, 1).sum().item())
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("library", ["onednn", "aten"])
def test_float32_products_with_many_rows_match_cpu_in_either_library(run_python, library):
    import json

    if library == "onednn" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        # ATen's oneDNN matmul refuses float32 on this CPU: forcing it is an error saying so, at the first
        # float32 product, and the process goes on
        out = run_python(_FIRST_PRODUCT_THEN_ANOTHER_OP, {"TORCHNEURON_FLOAT32_GEMM": "onednn"}).stdout
        assert "TORCHNEURON_FLOAT32_GEMM=onednn" in out and "use auto or aten" in out, out
        assert out.strip().splitlines()[-1] == str(64 * 64 * 2.0)
        return
    out = json.loads(run_python(_FLOAT32_GEMM_CHECKS, {"TORCHNEURON_FLOAT32_GEMM": library}, timeout=240)
                     .stdout.strip().splitlines()[-1])
    assert out["library"] == library
    results = out["results"]
    for name, value in results.items():
        if isinstance(value, list):
            ok, dev, ref, kernel = value
            assert ok, (name, f"device error {dev} vs CPU's {ref}")
            # oneDNN's products are counted as the device's own kernels; ATen's as the general path
            assert (kernel > 0) == (library == "onednn"), (name, kernel)
        else:
            assert value, name


def test_float32_library_follows_the_cpu_and_the_setting(run_python):
    cpuinfo = Path("/proc/cpuinfo").read_text()
    amd_avx512 = ("AuthenticAMD" in cpuinfo and " avx512f" in cpuinfo
                  and torch.ops.mkldnn._is_mkldnn_bf16_supported())  # ATen's oneDNN takes float32 there
    code = "import torchneuron; print(torchneuron.float32_gemm_library())"
    assert run_python(code, {"TORCHNEURON_FLOAT32_GEMM": ""}).stdout.strip() == ("onednn" if amd_avx512 else "aten")
    assert run_python(code, {"TORCHNEURON_FLOAT32_GEMM": "auto"}).stdout.strip() == ("onednn" if amd_avx512 else "aten")
    # A wrong name is an error at the first float32 product, naming the valid ones; the process goes on.
    bad = run_python(_FIRST_PRODUCT_THEN_ANOTHER_OP, {"TORCHNEURON_FLOAT32_GEMM": "mkl"})
    assert "TORCHNEURON_FLOAT32_GEMM='mkl'" in bad.stdout and "onednn or aten" in bad.stdout, bad.stdout
    assert bad.stdout.strip().splitlines()[-1] == str(64 * 64 * 2.0)


# c's type is what the operands are cast to: float32, or float64 for the exact result.
def _upcast_addmm(c, a, b):
    return torch.addmm(c, a.to(c.dtype), b.to(c.dtype), beta=0.5, alpha=2.0)


def _upcast_mm_transposed(c, a, b):
    return a.t().to(c.dtype) @ b[: a.shape[0]].to(c.dtype)


def _upcast_accumulate(c, a, b):
    # TRL's fused LM head: acc.addmm_(a.float(), b.float()) into zeros.
    acc = torch.zeros(a.shape[0], b.shape[1], device=a.device, dtype=c.dtype)
    acc.addmm_(a.to(c.dtype), b.to(c.dtype))
    return acc


def _upcast_mm_cast_kept(c, a, b):
    af = a.to(c.dtype)
    return af @ b.to(c.dtype), af


# "deep": an odd depth over several of the microkernel's slices (256 deep), rows
# and columns over several tiles with partial ones at the ends (Bf16Brgemm.cpp).
@pytest.mark.parametrize("m,k,n", [(96, 300, 70), (160, 320, 96), (300, 1101, 130)], ids=["small", "large", "deep"])
@pytest.mark.parametrize("fn", [_upcast_addmm, _upcast_mm_transposed, _upcast_accumulate, _upcast_mm_cast_kept],
                         ids=lambda f: f.__name__.strip("_"))
def test_compiled_product_of_upcast_bfloat16_is_one_mixed_precision_gemm(fn, m, k, n):
    # Products of bfloat16 operands cast to float32 compile to ATen's
    # addmm.dtype / mm.dtype (the pattern pass) where the target has a
    # mixed-precision GEMM at avx512_bf16: MKL's, with float32 accumulation,
    # on Intel CPUs, oneDNN's bfloat16 microkernel on others (alpha 1; the
    # addmm case's alpha 2 casts its operands). Elsewhere the casts stay fused
    # groups and the float32 GEMM is the eager products' (oneDNN on AMD CPUs
    # with AVX-512 from OneDnnGemm.h's size on; ATen's otherwise).
    if (m, k, n) == (300, 1101, 130) and (fn is _upcast_addmm or not torchneuron._C._compile_mixed_precision_gemm()):
        pytest.skip("the deep case checks the bfloat16 microkernel's slices (alpha 1, avx512_bf16); a float32 GEMM "
                    "through oneDNN sums in an order whose error at this depth is 2-4x MKL's on CPU (measured on an "
                    "AMD EPYC Zen 5), past this test's bound of twice CPU's error")
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).bfloat16()
    b = torch.randn(k, n, generator=g).bfloat16()
    c = torch.randn(n, generator=g)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron")
    got = compiled(c.to(D), a.to(D), b.to(D))
    got = got if isinstance(got, tuple) else (got,)
    cpu = fn(c, a, b)
    cpu = cpu if isinstance(cpu, tuple) else (cpu,)
    exact = fn(c.double(), a, b)
    exact = exact if isinstance(exact, tuple) else (exact,)
    for x, y, z in zip(got, cpu, exact):
        assert_as_close_as_cpu(x.cpu(), y, z)
    (record,) = torchneuron.compile_metrics()[-1:]
    (program,) = record["programs"].values()
    assert program["executor"] == "compiler"
    externs = program["extern_ops"]
    mixed, plain = ("aten::addmm.dtype", "aten::mm.dtype"), ("aten::addmm.default", "aten::mm.default")
    if not torchneuron._C._compile_mixed_precision_gemm():
        mixed, plain = plain, mixed
    assert sum(n for op, n in externs.items() if op in mixed) == 1, externs
    assert not any(op in plain for op in externs), externs


def test_mixed_precision_gemm_follows_the_isa_and_onednn(run_python):
    # Every CPU at avx512_bf16 has a bfloat16 GEMM with float32 accumulation
    # (MKL's on Intel CPUs, oneDNN's microkernel on others); a lower level, or
    # ATen's oneDNN turned off, casts the operands instead. A program compiled
    # with the mixed GEMM and run with oneDNN off still computes the product
    # (through the casts) as CPU does.
    code = """
import torch, torchneuron
print(torchneuron.kernel_isa(), torchneuron._C._compile_mixed_precision_gemm())
g = torch.Generator().manual_seed(0)
a, b = torch.randn(130, 700, generator=g).bfloat16(), torch.randn(700, 90, generator=g).bfloat16()
f = torch.compile(lambda a, b: a.float() @ b.float(), backend="neuron")
f(a.to("neuron"), b.to("neuron"))
torch.backends.mkldnn.enabled = False
print(torchneuron._C._compile_mixed_precision_gemm())
got, expected = f(a.to("neuron"), b.to("neuron")).cpu(), a.float() @ b.float()
print(torch.allclose(got, expected, rtol=1e-5, atol=1e-4), (got - expected).abs().max().item())
"""
    for level in torchneuron.supported_kernel_isas():
        lines = run_python(code, {"TORCHNEURON_ISA": level}).stdout.split()
        assert lines[:2] == [level, str(level == "avx512_bf16")], (level, lines)
        assert lines[2] == "False", (level, lines)
        assert lines[3] == "True", (level, lines)



def test_mixed_precision_gemm_survives_onednn_turned_off_while_it_runs(run_python):
    # ATen's microkernel reads torch.backends.mkldnn.enabled at every call: a
    # product queued with it on and still running when the host turns it off
    # finishes in float32 instead of failing (it did, on a slow machine, in the
    # test above). Accumulating into its own output (TRL's acc.addmm_) too.
    code = """
import torch, torchneuron
g = torch.Generator().manual_seed(0)
a, b = torch.randn(1024, 4096, generator=g).bfloat16(), torch.randn(4096, 1536, generator=g).bfloat16()
c = torch.randn(1024, 1536, generator=g)
expected = a.float() @ b.float()
for _ in range(3):
    torch.backends.mkldnn.enabled = True
    an, bn, acc = a.to("neuron"), b.to("neuron"), c.to("neuron")
    torch.neuron.synchronize()
    y = torch.mm(an, bn, out_dtype=torch.float32)
    torch.addmm(acc, an, bn, out_dtype=torch.float32, out=acc)
    torch.backends.mkldnn.enabled = False  # while the products run
    print(torch.allclose(y.cpu(), expected, rtol=1e-5, atol=1e-3),
          torch.allclose(acc.cpu(), c + expected, rtol=1e-5, atol=1e-3))
"""
    lines = run_python(code, {}, timeout=240).stdout.split()
    assert lines == ["True"] * 6, lines


# Products with an out_dtype (`torch.mm(a, b, out_dtype=torch.float32)`, as CUDA
# has them): ATen has no CPU kernel, so the reference is CPU's product of the
# operands cast to out_dtype (exact for 16-bit values), and float64 for the error.
OUT_DTYPE_PRODUCTS = {
    "mm": (lambda a, b, c, dt: torch.mm(a, b, out_dtype=dt),
           lambda a, b, c: torch.mm(a, b), ((37, 64), (64, 21), (21,))),
    "addmm": (lambda a, b, c, dt: torch.addmm(c, a, b, out_dtype=dt, beta=0.5, alpha=2.0),
              lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0), ((37, 64), (64, 21), (21,))),
    "bmm": (lambda a, b, c, dt: torch.bmm(a, b, out_dtype=dt),
            lambda a, b, c: torch.bmm(a, b), ((3, 9, 40), (3, 40, 11), (11,))),
    "baddbmm": (lambda a, b, c, dt: torch.baddbmm(c, a, b, out_dtype=dt, beta=0.25, alpha=-1.0),
                lambda a, b, c: torch.baddbmm(c, a, b, beta=0.25, alpha=-1.0), ((3, 9, 40), (3, 40, 11), (11,))),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype, out_dtype", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                              (torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)],
                         ids=str)
@pytest.mark.parametrize("name", sorted(OUT_DTYPE_PRODUCTS))
def test_products_with_an_out_dtype(name, dtype, out_dtype, compiled):
    fn, reference, shapes = OUT_DTYPE_PRODUCTS[name]
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(s, generator=g).to(dtype) for s in shapes[:2])
    c = torch.randn(shapes[2], generator=g).to(out_dtype)  # a bias of out_dtype
    # PyTorch's fake-tensor rule for baddbmm takes baddbmm.dtype's out_dtype for
    # beta (torch 2.13, any device): Dynamo breaks the graph there and runs it eagerly.
    whole = name != "baddbmm"
    run = torch.compile(fn, backend="neuron", fullgraph=whole) if compiled else fn
    if compiled:
        torch._dynamo.reset()
    got = run(a.to(D), b.to(D), c.to(D), out_dtype).cpu()
    assert got.dtype == out_dtype
    cpu = reference(a.to(out_dtype), b.to(out_dtype), c)
    exact = reference(a.double(), b.double(), c.double())
    assert_as_close_as_cpu(got, cpu, exact)
    if compiled and whole:
        (program,) = torchneuron.compile_metrics()[-1]["programs"].values()
        assert program["executor"] == "compiler", program


# Eager products of bfloat16 operands with a float32 result, as TRL's fused LM
# head accumulates its gradients on CUDA (and on neuron, hf_integration
# adaptation 17): one mixed-precision GEMM where the CPU has one.
EAGER_MIXED = {  # form: (op, the call, its reference on operands cast to the result's dtype)
    "accumulate": ("aten::addmm.dtype_out", lambda acc, a, b: torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc),
                   lambda acc, a, b: acc.addmm_(a, b)),
    "transposed": ("aten::addmm.dtype_out",
                   lambda acc, a, b: torch.addmm(acc, a.t().contiguous().t(), b, out_dtype=torch.float32, out=acc),
                   lambda acc, a, b: acc.addmm_(a, b)),
    "bias": ("aten::addmm.dtype", lambda acc, a, b: torch.addmm(acc[0], a, b, out_dtype=torch.float32, beta=0.5),
             lambda acc, a, b: torch.addmm(acc[0], a, b, beta=0.5)),
    "mm": ("aten::mm.dtype", lambda acc, a, b: torch.mm(a, b, out_dtype=torch.float32),
           lambda acc, a, b: torch.mm(a, b)),
}


@pytest.mark.parametrize("form", sorted(EAGER_MIXED))
def test_eager_products_of_bfloat16_with_a_float32_result_run_one_gemm(form):
    op, fn, reference = EAGER_MIXED[form]
    mixed = torchneuron._C._compile_mixed_precision_gemm()
    # An odd depth over several of the microkernel's slices (256 deep) where it
    # runs; else 301 deep: oneDNN's float32 GEMM of the casts sums in an order
    # whose error grows to 2-4x MKL's on CPU from about 1000 deep, past this
    # test's bound (measured on an AMD EPYC Zen 5).
    k = 1031 if mixed else 301
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(150, k, generator=g).bfloat16(), torch.randn(k, 70, generator=g).bfloat16()
    acc = torch.randn(150, 70, generator=g)
    before = kernel_runs(op)
    got = fn(acc.to(D), a.to(D), b.to(D)).cpu()
    cpu = reference(acc.clone(), a.float(), b.float())
    exact = reference(acc.double(), a.double(), b.double())
    assert_as_close_as_cpu(got, cpu, exact)
    # The mixed GEMM runs as the op's own kernel; without one, the operands are cast.
    assert kernel_runs(op) - before == int(mixed), torchneuron.executed_ops()


def test_products_with_an_out_dtype_write_out_and_take_a_16bit_bias():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 8, generator=g).bfloat16(), torch.randn(8, 3, generator=g).bfloat16()
    bias = torch.randn(3, generator=g).bfloat16()  # of the operands' dtype, as CUDA allows
    out = torch.empty(0, device=D)
    res = torch.mm(a.to(D), b.to(D), out_dtype=torch.float32, out=out)
    assert res is out and out.shape == (5, 3)
    torch.testing.assert_close(out.cpu(), a.float() @ b.float())
    got = torch.addmm(bias.to(D), a.to(D), b.to(D), out_dtype=torch.float32)
    torch.testing.assert_close(got.cpu(), torch.addmm(bias.float(), a.float(), b.float()))


@pytest.mark.parametrize("case, message", [
    ("wrong_out_dtype", r"aten::mm.dtype: out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs"),
    ("mixed_inputs", r"aten::mm.dtype: input dtypes must be the same, got BFloat16 and Float"),
    ("bias_dtype", r"aten::addmm.dtype: self dtype must match either out_dtype or mat1 dtype"),
    ("out_tensor_dtype", r"aten::mm.dtype_out: out_dtype must be the same as the dtype of the provided out tensor"),
    ("shapes", r"cannot be multiplied|size mismatch|shapes"),
])
def test_products_with_an_out_dtype_refuse_bad_input(case, message):
    a, b = torch.ones(4, 6, device=D, dtype=torch.bfloat16), torch.ones(6, 2, device=D, dtype=torch.bfloat16)
    calls = {
        "wrong_out_dtype": lambda: torch.mm(a.float(), b.float(), out_dtype=torch.float16),
        "mixed_inputs": lambda: torch.mm(a, b.float(), out_dtype=torch.float32),
        "bias_dtype": lambda: torch.addmm(torch.ones(2, device=D, dtype=torch.float16), a, b, out_dtype=torch.float32),
        "out_tensor_dtype": lambda: torch.mm(a, b, out_dtype=torch.float32, out=torch.empty(4, 2, device=D)
                                             .bfloat16()),
        "shapes": lambda: torch.mm(a, a, out_dtype=torch.float32),
    }
    with pytest.raises(RuntimeError, match=message):
        calls[case]()
    assert torch.mm(a, b, out_dtype=torch.float32).sum().item() == 4 * 2 * 6.0
