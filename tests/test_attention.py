"""scaled_dot_product_attention on neuron: the device's attention kernel
(kernels/, chosen through PyTorch's _fused_sdp_choice as the "overrideable"
backend) against PyTorch on CPU, forward and backward, with the masks that
text generation uses; and the cases it hands to PyTorch's math path."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import torchneuron

D = "neuron"
KERNEL = "aten::_scaled_dot_product_fused_attention_overrideable"
KERNEL_BWD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"


def _bool_mask(kind, B, L, S):
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    if kind == "causal_bottom_right":  # prefill after a cache: queries are the last L positions
        m = j <= i + (S - L)
        return m.expand(B, 1, L, S)
    if kind == "left_padding":  # row b starts with b padding tokens; causal
        pad = torch.arange(B)[:, None, None, None]
        return (j <= i + (S - L)) & (j >= pad)
    if kind == "sliding_window":
        return ((j <= i + (S - L)) & (j > i + (S - L) - 4)).expand(B, 1, L, S)
    if kind == "static_cache_decode":  # L == 1; only the first `filled` slots hold keys
        filled = torch.tensor([S // 3 + b for b in range(B)])[:, None, None, None]
        return (j < filled).expand(B, 1, L, S)
    raise AssertionError(kind)


CASES = {
    # name: (B, Hq, Hkv, L, S, Dk, Dv, is_causal, mask kind or None)
    "causal_prefill": (2, 4, 4, 70, 70, 32, 32, True, None),
    "causal_gqa": (1, 6, 2, 130, 130, 64, 64, True, None),
    "padded_prefill": (3, 4, 2, 20, 20, 32, 32, False, "left_padding"),
    "static_cache_decode": (3, 8, 2, 1, 150, 64, 64, False, "static_cache_decode"),
    "prefill_after_cache": (2, 4, 4, 5, 69, 16, 16, False, "causal_bottom_right"),
    "sliding_window": (1, 4, 1, 40, 40, 16, 24, False, "sliding_window"),
    "no_mask_cross_attention": (2, 2, 2, 7, 33, 8, 8, False, None),
}


def _inputs(case, dtype, seed=0):
    B, Hq, Hkv, L, S, Dk, Dv, causal, mask_kind = CASES[case]
    g = torch.Generator().manual_seed(seed)
    # q as attention layers make it: [B, L, H, D] memory viewed as [B, H, L, D]
    q = torch.randn(B, L, Hq, Dk, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(B, Hkv, S, Dk, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, Dv, generator=g).to(dtype)
    mask = _bool_mask(mask_kind, B, L, S) if mask_kind else None
    return q, k, v, mask, dict(is_causal=causal, enable_gqa=Hq != Hkv)


def _run(device, q, k, v, mask, kwargs, grad_seed=1):
    q, k, v = (t.detach().to(device).requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.to(device),
                                         **kwargs)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed)).to(out.dtype)
    out.backward(g.to(device))
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_cpu_forward_and_backward(case, dtype):
    q, k, v, mask, kwargs = _inputs(case, dtype)
    torchneuron.reset_executed_ops()
    got = _run(D, q, k, v, mask, kwargs)
    torch.neuron.synchronize()
    ops = torchneuron.executed_ops()
    assert ops.get(KERNEL) == {"kernel": 1} and ops.get(KERNEL_BWD) == {"kernel": 1}, ops
    assert "aten::_softmax" not in ops and "aten::bmm" not in ops, "took the math path"
    want = _run("cpu", q, k, v, mask, kwargs)
    for name, a, b in zip(("output", "grad q", "grad k", "grad v"), got, want):
        if dtype == torch.float32:
            torch.testing.assert_close(a, b, msg=lambda m: f"{name}: {m}")
        else:
            # CPU's reduced-precision kernel rounds its probabilities to 16 bits
            # before P.V; neuron keeps them in float32. Compare both to float64.
            ref = _run("cpu", *(t.double() for t in (q, k, v)), mask, kwargs)[
                ("output", "grad q", "grad k", "grad v").index(name)]
            err_neuron = (a.double() - ref).abs().max().item()
            err_cpu = (b.double() - ref).abs().max().item()
            # at most one rounding of the 16-bit result worse than CPU
            one_rounding = torch.finfo(dtype).eps * ref.abs().max().item()
            assert err_neuron <= err_cpu + one_rounding, (name, err_neuron, err_cpu, one_rounding)


def test_output_is_laid_out_for_the_following_transpose():
    q, k, v, mask, kwargs = _inputs("causal_prefill", torch.float32)
    out = F.scaled_dot_product_attention(q.to(D), k.to(D), v.to(D), **kwargs)
    # [B, H, L, D] viewing [B, L, H, D] memory: transpose(1, 2) is contiguous
    assert out.transpose(1, 2).is_contiguous()


def test_explicit_scale_and_float_bias_with_its_gradient():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 9, 16, generator=g) for _ in range(3))
    bias = torch.randn(3, 9, 9, generator=g)  # broadcast over the batch
    res = {}
    for dev in ("cpu", D):
        qq, kk, vv, bb = (t.to(dev).detach().requires_grad_() for t in (q, k, v, bias))
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=bb, scale=0.3)
        out.square().sum().backward()
        res[dev] = [t.detach().cpu() for t in (out, qq.grad, kk.grad, vv.grad, bb.grad)]
    for a, b in zip(res[D], res["cpu"]):
        torch.testing.assert_close(a, b)


def test_row_that_sees_no_key_matches_cpu():
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    mask = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 sees nothing
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = F.scaled_dot_product_attention(q.to(D), k.to(D), v.to(D), attn_mask=mask.to(D)).cpu()
    torch.testing.assert_close(got, want)


def test_zero_sizes():
    for shape_q, shape_kv in [((0, 2, 3, 8), (0, 2, 4, 8)), ((1, 2, 0, 8), (1, 2, 4, 8)),
                              ((1, 2, 3, 8), (1, 2, 0, 8))]:
        q, k = torch.randn(shape_q), torch.randn(shape_kv)
        want = F.scaled_dot_product_attention(q, k, k)
        got = F.scaled_dot_product_attention(q.to(D), k.to(D), k.to(D)).cpu()
        torch.testing.assert_close(got, want)


def _ran_kernel(fn):
    torchneuron.reset_executed_ops()
    result = fn()
    torch.neuron.synchronize()
    return KERNEL in torchneuron.executed_ops(), result


def test_math_path_for_what_the_kernel_does_not_take():
    x = torch.randn(1, 2, 5, 8)
    n = x.to(D)
    # dropout draws its mask in the math path, from the neuron generator
    used, out = _ran_kernel(lambda: F.scaled_dot_product_attention(n, n, n, dropout_p=0.5))
    assert not used and out.shape == x.shape and out.device.type == D
    # float64: the kernel accumulates in float32
    used, out = _ran_kernel(lambda: F.scaled_dot_product_attention(n.double(), n.double(), n.double()))
    assert not used
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(x.double(), x.double(), x.double()))
    # the user asked for the math backend
    with sdpa_kernel([SDPBackend.MATH]):
        used, out = _ran_kernel(lambda: F.scaled_dot_product_attention(n, n, n))
    assert not used
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        used, out = _ran_kernel(lambda: F.scaled_dot_product_attention(n, n, n))
    assert used


def test_only_the_kernel_allowed_but_it_cannot_run_says_what_to_do():
    n = torch.randn(1, 2, 5, 8, device=D)
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        with pytest.raises(RuntimeError, match=r"neuron attention kernel .*cannot take.*dropout_p=0.5.*"
                                               r"Add SDPBackend.MATH"):
            F.scaled_dot_product_attention(n, n, n, dropout_p=0.5)
    # the device keeps working
    assert F.scaled_dot_product_attention(n, n, n).shape == n.shape


def test_fused_sdp_choice_through_the_dispatcher_is_the_devices():
    n = torch.randn(1, 2, 5, 8, device=D)
    assert torch.ops.aten._fused_sdp_choice(n, n, n) == SDPBackend.OVERRIDEABLE.value
    assert torch.ops.aten._fused_sdp_choice(n, n, n, dropout_p=0.5) == SDPBackend.MATH.value
    with sdpa_kernel([SDPBackend.MATH]):
        assert torch.ops.aten._fused_sdp_choice(n, n, n) == SDPBackend.MATH.value


@pytest.mark.parametrize("backends", [
    [SDPBackend.FLASH_ATTENTION],
    [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION],
], ids=["flash", "efficient_cudnn"])
def test_sdpa_kernel_with_only_cuda_backends_names_what_neuron_runs(backends):
    n = torch.randn(1, 2, 5, 8, device=D)
    names = ", ".join(b.name for b in backends)
    with sdpa_kernel(backends):
        with pytest.raises(RuntimeError, match=rf"no enabled backend runs on neuron.*"
                                               rf"SDPBackend.OVERRIDEABLE.*SDPBackend.MATH.*"
                                               rf"enabled {names}\."):
            F.scaled_dot_product_attention(n, n, n)
    # a CUDA backend next to one neuron runs is fine, as on CUDA
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.OVERRIDEABLE]):
        used, out = _ran_kernel(lambda: F.scaled_dot_product_attention(n, n, n))
    assert used
    torch.testing.assert_close(out.cpu(), F.scaled_dot_product_attention(n.cpu(), n.cpu(), n.cpu()))


def test_bad_input_is_refused_at_the_call():
    q = torch.randn(1, 6, 5, 8, device=D)
    kv = torch.randn(1, 4, 5, 8, device=D)
    with pytest.raises(RuntimeError):  # 6 query heads cannot share 4 key/value heads
        F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, kv.cpu(), kv.cpu())
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(3, 3, dtype=torch.bool, device=D))
    with pytest.raises(RuntimeError, match="is_causal"):
        F.scaled_dot_product_attention(q, q, q, is_causal=True,
                                       attn_mask=torch.ones(5, 5, dtype=torch.bool, device=D))
    # the direct op names itself
    with pytest.raises(RuntimeError, match=r"_scaled_dot_product_fused_attention_overrideable: "
                                           r"query heads \(6\) must be a multiple of key/value heads \(4\)"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, kv, kv)
    torch.neuron.synchronize()
    assert F.scaled_dot_product_attention(q, q, q).shape == q.shape


def test_hugging_face_generation_uses_the_kernel():
    transformers = pytest.importorskip("transformers", reason="Hugging Face Transformers is not installed")
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                                      eos_token_id=2, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    # hf_integration lets masked attention keep grouped key/value heads on
    # neuron (no repeat_kv copy of the cache per layer and step)
    from transformers.integrations import sdpa_attention
    mask4d = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    key = torch.randn(1, 2, 3, 8)
    assert sdpa_attention.use_gqa_in_sdpa(mask4d.to(D), key.to(D), key.to(D)) is True
    assert sdpa_attention.use_gqa_in_sdpa(mask4d, key, key) is sdpa_attention.use_gqa_in_sdpa.__wrapped__(
        mask4d, key, key)
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 7, 8, 9]])
    mask = (ids != 0).long()
    kw = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    want = model.generate(ids, attention_mask=mask, **kw)
    model.to(D)
    for cache in ("dynamic", "static"):
        extra = dict(cache_implementation="static", disable_compile=True) if cache == "static" else {}
        torchneuron.reset_executed_ops()
        got = model.generate(ids.to(D), attention_mask=mask.to(D), **kw, **extra)
        ops = torchneuron.executed_ops()
        assert torch.equal(got.cpu(), want), cache
        assert ops[KERNEL]["kernel"] >= 2 * 8, (cache, ops.get(KERNEL))  # every layer of every step
        assert "aten::_softmax" not in ops, cache


def test_process_exits_cleanly_after_attention(start_python):
    # Queued attention work once held the user's tensors; the worker then
    # dropped their Python objects while the interpreter shut down and the
    # process aborted at exit ("terminate called without an active exception").
    code = """
        import torch
        q = torch.randn(1, 2, 3, 8, device="neuron", requires_grad=True)
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        out.sum().backward()
        print(out.shape[-1])
    """
    children = [start_python(code) for _ in range(4)]  # it failed about 3 runs in 4
    for child in children:
        assert child.wait(60).stdout.split() == ["8"]


def test_fused_op_returns_tensors_autograd_saves_so_aot_autograd_works():
    # autograd saves the dropout seed and offset for the backward; AOTAutograd
    # (any torch.compile backend) requires them to be tensors, as CUDA returns
    n = torch.randn(1, 2, 8, 16, device=D)
    outs = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(n, n, n)
    assert all(isinstance(outs[i], torch.Tensor) for i in (0, 1, 6, 7))

    def loss(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()

    cpu = [torch.randn(1, 2, 8, 16, requires_grad=True) for _ in range(3)]
    dev = [t.detach().to(D).requires_grad_() for t in cpu]
    torch._dynamo.reset()
    compiled = torch.compile(loss, backend="aot_eager", fullgraph=True)
    got = compiled(*dev)
    got.backward()
    want = loss(*cpu)
    want.backward()
    torch.testing.assert_close(got.cpu(), want)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad)
