"""The graph compiler behind torch.compile(backend="neuron") (compiler/, csrc/compiler/):
fusion, the device's kernels in programs (pattern fusion), integer inputs as runtime values.

Each compiled result is compared with PyTorch on CPU; each test also checks
that the compiler really ran: the record of compile_metrics() names the
"compiler" executor with fused groups, and a call queues exactly one task on
the device (the runtime's queued-work counter).
"""
import copy

import pytest
import torch
import torch._dynamo

import torchneuron
from torchneuron import _C

TOL = dict(rtol=1e-5, atol=1e-5)
BF16_TOL = dict(rtol=2e-2, atol=2e-2)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    torchneuron.reset_compile_metrics()
    yield
    torch._dynamo.reset()


def programs():
    return {kind: p for r in torchneuron.compile_metrics() for kind, p in r["programs"].items()}


def submissions(fn, *args):
    """(result, tasks queued on the device by one call)."""
    torch.neuron.synchronize()
    before = _C._queued_work_count()
    out = fn(*args)
    after = _C._queued_work_count()
    torch.neuron.synchronize()
    return out, after - before


def pair(make, dtype=torch.float32):
    torch.manual_seed(0)
    cpu = make().to(dtype)
    return copy.deepcopy(cpu).to("neuron"), cpu


class MLP(torch.nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))) * torch.sigmoid(x) + x


class Block(torch.nn.Module):
    """A pre-norm transformer block: attention written out (matmuls, scale, causal
    mask, softmax), residuals, RMS-style scaling and a SwiGLU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.norm2 = torch.nn.LayerNorm(d)
        self.gate = torch.nn.Linear(d, 2 * d, bias=False)
        self.up = torch.nn.Linear(d, 2 * d, bias=False)
        self.down = torch.nn.Linear(2 * d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def test_mlp_inference_is_one_submission_with_fused_groups():
    model, cpu = pair(MLP)
    x = torch.randn(8, 32)
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        compiled(x.to("neuron"))
        got, tasks = submissions(compiled, x.to("neuron"))
        ref = cpu(x)
    torch.testing.assert_close(got.cpu(), ref, **TOL)
    assert tasks == 1
    (program,) = programs().values()
    assert program["executor"] == "compiler", program
    assert program["fused_groups"] > 0 and program["fused_nodes"] > program["fused_groups"]
    assert program["extern"] > 0  # the matmuls, as ATen's CPU kernels
    assert program["arena_bytes"] > 0 and program["arena_bytes"] % 64 == 0
    record = torchneuron.compile_metrics()[-1]
    assert record["executor"] == "compiler"
    assert record["nodes"]["inference"]["fused_groups"] == program["fused_groups"]
    assert {"serialize_inference", "parse_inference", "fusion_inference", "planning_inference"} <= set(record["times_ms"])


def test_transformer_block_matches_cpu():
    model, cpu = pair(Block)
    x = torch.randn(2, 8, 32)
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        first = compiled(x.to("neuron"))  # compiles: its causal mask is folded, computed on the device then
        got, tasks = submissions(compiled, x.to("neuron"))
        ref = cpu(x)
    torch.testing.assert_close(first.cpu(), ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4)
    (program,) = programs().values()
    assert program["executor"] == "compiler", program
    assert program["fused_groups"] >= 3
    assert program["constant_folded"] >= 2  # ones, tril (the mask's not stays with its readers or folds too)
    assert tasks == 1


def test_sdpa_block_matches_cpu():
    class Attn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 6, 3, 2, 8).permute(2, 0, 3, 1, 4)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum(-1).exp()

    model, cpu = pair(Attn)
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        got = torch.compile(model, backend="neuron")(x.to("neuron"))
        ref = cpu(x)
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4)
    assert all(p["executor"] in ("compiler", "eager") for p in programs().values())


def test_training_step_forward_and_backward_are_compiled():
    model, cpu = pair(MLP)
    x, target = torch.randn(8, 32), torch.randn(8, 32)
    compiled = torch.compile(model, backend="neuron")
    for _ in range(2):  # the second step runs the compiled graphs again
        model.zero_grad()
        cpu.zero_grad()
        loss = ((compiled(x.to("neuron")) - target.to("neuron")) ** 2).mean()
        loss.backward()
        ref = ((cpu(x) - target) ** 2).mean()
        ref.backward()
        torch.testing.assert_close(loss.cpu(), ref, **TOL)
        for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)
    progs = programs()
    assert progs["forward"]["executor"] == "compiler" and progs["backward"]["executor"] == "compiler", progs
    assert progs["forward"]["fused_groups"] > 0 and progs["backward"]["fused_groups"] > 0


def test_bfloat16_mlp_matches_cpu():
    model, cpu = pair(MLP, torch.bfloat16)
    x = torch.randn(8, 32).bfloat16()
    with torch.no_grad():
        got, tasks = submissions(torch.compile(model, backend="neuron"), x.to("neuron"))
        ref = cpu(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu().float(), ref.float(), **BF16_TOL)
    assert tasks == 1
    assert programs()["inference"]["fused_groups"] > 0


def test_input_mutation_updates_the_callers_tensor_in_place():
    def step(cache, pos, x):
        cache[:, pos] = x * 2  # a KV-cache style update of an input
        cache.mul_(0.5)
        return cache.sum(-1)

    cache_cpu = torch.randn(3, 5)
    cache = cache_cpu.to("neuron")
    x = torch.randn(3)
    ptr = cache.data_ptr()
    compiled = torch.compile(step, backend="neuron")
    with torch.no_grad():
        got = compiled(cache, 2, x.to("neuron"))
        ref = step(cache_cpu, 2, x)
    assert cache.data_ptr() == ptr
    torch.testing.assert_close(cache.cpu(), cache_cpu, **TOL)
    torch.testing.assert_close(got.cpu(), ref, **TOL)
    assert programs()["inference"]["executor"] == "compiler", programs()


def test_outputs_that_alias_inputs_stay_views():
    def f(x):
        return x.view(-1), x.t(), x * 2

    x = torch.randn(4, 3, device="neuron")
    flat, t, doubled = torch.compile(f, backend="neuron")(x)
    assert flat.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    x.add_(1)  # later writes to the input show through the views
    torch.testing.assert_close(flat.cpu(), x.cpu().view(-1))
    torch.testing.assert_close(t.cpu(), x.cpu().t())
    torch.testing.assert_close(doubled.cpu(), (x.cpu() - 1) * 2)


def test_data_dependent_shapes_run_the_graph_eagerly():
    def f(x):
        return (x[x > 0] * 2).sum() + x.exp().sum()

    x = torch.randn(16)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        got = torch.compile(f, backend="neuron", fullgraph=True)(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), f(x), **TOL)
    (program,) = programs().values()
    assert program["executor"] == "eager"
    assert "depends on tensor values read on the host" in program["reason"], program


def test_integer_tensor_indexing_is_one_program():
    """aten::index.Tensor with integer index tensors (Transformers' attention masks:
    `padding_mask[batch_idx, kv_idx]` with broadcast aranges) has a shape known at
    compile time: an extern gather inside the program, one submission, forward and
    backward equal CPU. Only boolean indices (above) run eagerly."""
    def f(mask, x, rows):
        b, k = torch.arange(mask.shape[0], device=mask.device), torch.arange(mask.shape[1], device=mask.device)
        gathered = mask[b[:, None, None], k[None, None, :]]  # [2, 1, 6]
        return gathered * x[rows].sum(-1, keepdim=True)

    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.float32)
    x = torch.randn(5, 6, requires_grad=True)
    rows = torch.tensor([[4, 0]]).T  # [2, 1], int64
    xd = x.detach().to("neuron").requires_grad_()
    compiled = torch.compile(f, backend="neuron")
    compiled(mask.to("neuron"), xd, rows.to("neuron"))  # compiles
    got, queued = submissions(compiled, mask.to("neuron"), xd, rows.to("neuron"))
    want = f(mask, x, rows)
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert queued == 1
    got.square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad, **TOL)
    progs = programs()
    assert all(p["executor"] == "compiler" for p in progs.values()), progs
    assert progs["forward"]["extern_ops"]["aten::index.Tensor"] == 2


def test_symbolic_shapes_run_the_graph_eagerly():
    f = torch.compile(lambda x: (x * 2).softmax(-1), backend="neuron", dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x.to("neuron")).cpu(), (x * 2).softmax(-1), **TOL)
    assert len(torchneuron.compile_metrics()) == 1
    (program,) = programs().values()
    assert program["executor"] == "eager" and "not a tensor" in program["reason"] or "symbolic" in program["reason"]


NEG_GRAPH = """neurongraph 1
value 0 float32 - 0 1 4 1
value 1 float32 - 0 1 4 1
input %0 x
node aten::neg.default 1 %1 1 %0
output %1
end
"""


def test_a_program_checks_its_inputs_by_name():
    graph = _C._compile_graph(NEG_GRAPH, "graph test (inference)")
    assert graph.run([torch.ones(4, device="neuron")])[0].cpu().tolist() == [-1.0] * 4
    with pytest.raises(RuntimeError, match=r"graph test \(inference\): input x is a cpu tensor \[4\] Float"):
        graph.run([torch.ones(4)])
    with pytest.raises(RuntimeError, match=r"input x is Float \[5\].*compiled for Float \[4\]"):
        graph.run([torch.ones(5, device="neuron")])
    with pytest.raises(RuntimeError, match=r"expected 1 inputs, got 0"):
        graph.run([])
    assert graph.run([torch.full((4,), 2.0, device="neuron")])[0].cpu().tolist() == [-2.0] * 4


def test_a_malformed_graph_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"compile graph 7 \(forward\): graph line 2: unknown dtype 'float33'"):
        _C._compile_graph("neurongraph 1\nvalue 0 float33 - 0 0\nend\n", "graph 7 (forward)")
    with pytest.raises(RuntimeError, match=r"unknown operator aten::nope"):
        _C._compile_graph(NEG_GRAPH.replace("aten::neg.default", "aten::nope.default"), "graph 8 (forward)")


def test_programs_round_trip_through_bytes():
    graph = _C._compile_graph(NEG_GRAPH, "graph 9 (inference)")
    again = _C._load_compiled_graph(graph.serialize(), "graph 9 (inference)")
    assert again.describe() == graph.describe()
    assert again.run([torch.ones(4, device="neuron")])[0].cpu().tolist() == [-1.0] * 4
    with pytest.raises(RuntimeError, match=r"load graph 9 \(inference\): program bytes: "):
        _C._load_compiled_graph(graph.serialize()[:20], "graph 9 (inference)")


def test_an_error_inside_the_program_names_the_step_and_the_process_keeps_working():
    emb = torch.nn.Embedding(4, 3).to("neuron")
    compiled = torch.compile(lambda ids: emb(ids) * 2, backend="neuron")
    with torch.no_grad():
        compiled(torch.tensor([0, 1], device="neuron"))
        # Queued: the error surfaces at the next launch or synchronization, with eager's type.
        with pytest.raises(IndexError, match=r"step \d+ \(extern call aten::embedding"):
            compiled(torch.tensor([0, 9], device="neuron"))
            torch.neuron.synchronize()
        assert compiled(torch.tensor([3, 1], device="neuron")).shape == (2, 3)


# ------------------------------------------------ the device's kernels in programs
# Pattern fusion (compiler/include/neuroncompiler/patterns.hpp): norms, the rotary
# embedding and attention run the device's own kernels inside the program.


def one_submission(fn, *args):
    """fn(*args), asserting that the call queued exactly one task on the device."""
    out, tasks = submissions(fn, *args)
    assert tasks == 1
    return out


class HFRMSNorm(torch.nn.Module):
    """Hugging Face's LlamaRMSNorm, as written there."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(torch.nn.Module):
    """Norm, projections, rotary embedding (as the Llama family writes it) and SDPA
    with grouped-query heads: what a decoder layer's attention half does."""

    def __init__(self, d=64, heads=4, kv_heads=2, norm="rms"):
        super().__init__()
        self.h, self.kv, self.hd = heads, kv_heads, d // heads
        self.norm = HFRMSNorm(d) if norm == "rms" else torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.k = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = torch.nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin, mask=None):
        b, t, d = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                             enable_gqa=True)
        return x + self.o(a.transpose(1, 2).reshape(b, t, d))


def rope_tables(b, t, hd):
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    freqs = torch.arange(t).float()[:, None] * inv[None]
    emb = torch.cat((freqs, freqs), -1).expand(b, t, hd)
    return emb.cos(), emb.sin()


@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_attention_block_runs_the_device_kernels(norm):
    model, cpu = pair(lambda: Attention(norm=norm))
    x = torch.randn(2, 12, 64)
    cos, sin = rope_tables(2, 12, 16)
    args = [a.to("neuron") for a in (x, cos, sin)]
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        compiled(*args)
        got = one_submission(compiled, *args)
        ref = cpu(x, cos, sin)
    torch.testing.assert_close(got.cpu(), ref, rtol=1e-4, atol=1e-4)
    (program,) = programs().values()
    # norm, rotary embedding of q and of k, attention
    assert program["executor"] == "compiler" and program["native_kernels"] == 4, program
    assert program["native_nodes"] == (1 if norm == "layer" else 6) + 10 + 1, program


def test_training_step_runs_the_attention_kernel_forward_and_backward():
    model, _ = pair(Attention)
    eager = copy.deepcopy(model)
    x = torch.randn(2, 10, 64, device="neuron", requires_grad=True)
    cos, sin = (t.to("neuron") for t in rope_tables(2, 10, 16))
    compiled = torch.compile(model, backend="neuron")
    for _ in range(2):
        for m in (model, eager):
            m.zero_grad()
        x.grad = None
        compiled(x, cos, sin).square().mean().backward()
        got = x.grad.clone()
        x.grad = None
        eager(x, cos, sin).square().mean().backward()
        torch.testing.assert_close(got.cpu(), x.grad.cpu(), **TOL)
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)
    progs = programs()
    assert progs["forward"]["executor"] == "compiler" and progs["backward"]["executor"] == "compiler", progs
    assert progs["forward"]["native_kernels"] >= 4 and progs["backward"]["native_kernels"] >= 1, progs


def test_training_step_with_a_padding_mask_runs_the_attention_kernel_backward():
    """An additive mask that needs no gradient (Transformers' causal-and-padding mask):
    the backward's gradient of the mask is not asked for (grad_input_mask[3] false)
    but still has a value in the AOT graph; nothing reads it, so the device's
    attention backward takes the node. Gradients equal CPU's."""
    model, cpu = pair(Attention)
    b, t = 2, 10
    keep = torch.ones(b, t, dtype=torch.bool)
    keep[0, :3] = False  # left padding of row 0
    allowed = torch.ones(t, t, dtype=torch.bool).tril()[None] & keep[:, None, :]
    mask = torch.zeros(b, 1, t, t).masked_fill(~allowed[:, None], float("-inf"))
    x = torch.randn(b, t, 64)
    cos, sin = rope_tables(b, t, 16)
    compiled = torch.compile(model, backend="neuron")
    xd = x.to("neuron").requires_grad_()
    compiled(xd, cos.to("neuron"), sin.to("neuron"), mask.to("neuron")).square().mean().backward()
    xc = x.clone().requires_grad_()
    cpu(xc, cos, sin, mask).square().mean().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=name)
    progs = programs()
    assert progs["forward"]["executor"] == "compiler" and progs["backward"]["executor"] == "compiler", progs
    assert progs["backward"]["native_kernels"] >= 1, progs


def test_bfloat16_rms_norm_matches_cpu():
    model, cpu = pair(lambda: HFRMSNorm(96), torch.bfloat16)
    x = torch.randn(3, 5, 96).bfloat16()
    compiled = torch.compile(model, backend="neuron")
    with torch.no_grad():
        got = one_submission(compiled, x.to("neuron"))
        ref = cpu(x)
    torch.testing.assert_close(got.cpu().float(), ref.float(), rtol=1e-2, atol=1e-2)
    assert programs()["inference"]["native_kernels"] == 1


def test_attention_with_dropout_takes_the_math_path_drawn_as_eager():
    """The device's attention has no dropout: SDPA picks the math path, whose dropout the
    program draws from the device generator as eager does."""
    def f(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5)

    q = torch.randn(1, 2, 4, 8, device="neuron")
    torch.manual_seed(5)
    got = torch.compile(f, backend="neuron")(q, q, q)
    torch.manual_seed(5)
    torch.testing.assert_close(got.cpu(), f(q, q, q).cpu(), **TOL)
    (program,) = programs().values()
    assert program["executor"] == "compiler" and program["native_kernels"] == 0, program


class Counter:
    def __init__(self):
        self.n = 3


def test_integer_inputs_are_runtime_values_of_one_program():
    """An int that Dynamo makes a runtime value (as hf_integration makes a sliding-window
    cache's fill level) is computed on the host per call: one program, one submission per
    call, no recompilation when it changes."""
    state = Counter()

    def step(x):
        state.n += 1
        return (x * 2).exp() + 1

    for _ in range(2):  # a queued op sets this thread's intra-op threads, which Dynamo guards on
        torch.ones(2, device="neuron").exp()
    compiled = torch.compile(step, backend="neuron")
    x = torch.randn(8, device="neuron")
    with torch.compiler.config.patch(dynamic_sources=r".*\.n"):
        for n in range(4, 8):
            got = one_submission(compiled, x)
            assert state.n == n
            torch.testing.assert_close(got.cpu(), (x.cpu() * 2).exp() + 1, **TOL)
    assert len(torchneuron.compile_metrics()) == 1, [r["recompile_reason"] for r in torchneuron.compile_metrics()]
    assert programs()["inference"]["executor"] == "compiler"


def test_a_training_step_with_dropout_is_compiled_and_equals_eager():
    """Dropout draws its mask from the device generator inside the program, as eager draws
    it: under one seed, compiled and eager gradients agree (another mask would zero other
    units; the GELU's last bits differ between the tile interpreter and ATen)."""
    model, _ = pair(lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.3), torch.nn.GELU(),
                                                torch.nn.Linear(32, 4)))
    eager = copy.deepcopy(model)
    x = torch.randn(8, 16, device="neuron")
    compiled = torch.compile(model, backend="neuron")
    for seed in (3, 4):
        for m, run in ((model, compiled), (eager, eager)):
            m.zero_grad()
            torch.manual_seed(seed)
            run(x).square().sum().backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **TOL, msg=name)
    progs = programs()
    assert progs["forward"]["executor"] == "compiler" and progs["backward"]["executor"] == "compiler", progs


def test_constants_of_the_graph_are_inputs_of_the_program():
    """A tensor built from literals inside the compiled function is a constant of the AOT
    graph (get_attr): the program takes it as an input on every call."""
    def f(x):
        return (x + torch.tensor([1.0, 2.0, 3.0], device=x.device)).exp()

    compiled = torch.compile(f, backend="neuron")
    x = torch.randn(4, 3)
    compiled(x.to("neuron"))
    got = one_submission(compiled, x.to("neuron"))
    torch.testing.assert_close(got.cpu(), f(x), **TOL)
    assert programs()["inference"]["executor"] == "compiler", programs()


def test_extern_calls_write_their_planned_buffers():
    """Extern ATen calls with a structured out= overload (mm above the skinny matmul's rows,
    cumsum, topk with both results read) write the program's buffers directly, arena values
    and program outputs alike; topk with one result read keeps the functional call."""
    def f(x, w):
        h = torch.mm(x, w)  # an arena value read by the next steps
        c = torch.cumsum(h, dim=0)
        vals, idx = torch.topk(c, 5, dim=-1)
        only_vals = torch.topk(h.t(), 3, dim=-1).values
        return c.exp(), vals * 2, idx, only_vals + 1, torch.mm(c, w.t())

    compiled = torch.compile(f, backend="neuron")
    torch.manual_seed(0)
    x, w = torch.randn(64, 48), torch.randn(48, 40) / 8
    compiled(x.to("neuron"), w.to("neuron"))
    got = one_submission(compiled, x.to("neuron"), w.to("neuron"))
    for g, e in zip(got, f(x, w)):
        torch.testing.assert_close(g.cpu(), e, **TOL)
    prog = programs()["inference"]
    assert prog["executor"] == "compiler", prog
    assert {"aten::mm.default", "aten::cumsum.default", "aten::topk.default"} <= set(prog["extern_ops"]), prog


def _scatters_into_intermediates(x, a, b, c):
    y = torch.slice_scatter(x * 2, a, dim=1, start=4)  # end None
    z = torch.slice_scatter(y + 1, b, dim=2, start=1, end=7, step=3)
    return torch.select_scatter(z, c, dim=0, index=1) * 3


def _scatters_whose_self_is_read_after(x, a, b, c):
    base = x * 2
    y = torch.slice_scatter(base, a, dim=1, start=4)
    z = torch.select_scatter(y + 1, c, dim=0, index=1)
    return z + base, y


@pytest.mark.parametrize("f, externs", [(_scatters_into_intermediates, 0), (_scatters_whose_self_is_read_after, 1)],
                         ids=["into-intermediates", "self-read-after"])
def test_slice_and_select_scatter_write_their_planned_buffers(f, externs):
    """slice_scatter and select_scatter (no structured out=): into an intermediate
    nothing reads afterwards, src is copied into its slice in place (re-inplacing, a
    fused group); otherwise the extern call computes it in the program's buffer, self
    copied in, src into its slice. Equal to eager bit for bit, open and stepped slices
    included."""
    compiled = torch.compile(f, backend="neuron")
    torch.manual_seed(0)
    args = (torch.randn(3, 10, 8), torch.randn(3, 6, 8), torch.randn(3, 10, 2), torch.randn(10, 8))
    dev = [t.to("neuron") for t in args]
    compiled(*dev)
    got = one_submission(compiled, *dev)
    got, expected, cpu = [r if isinstance(r, tuple) else (r,) for r in (got, f(*dev), f(*args))]
    for g, e, c in zip(got, expected, cpu):
        assert torch.equal(g.cpu(), e.cpu())
        torch.testing.assert_close(g.cpu(), c, **TOL)
    prog = programs()["inference"]
    assert prog["executor"] == "compiler", prog
    scatters = {op: n for op, n in prog["extern_ops"].items() if "scatter" in op}
    assert sum(scatters.values()) == externs, prog["extern_ops"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_weight_gradient_is_made_in_the_planned_buffer(dtype):
    """The backward program's embedding_dense_backward equals eager bit for bit (padding
    row, repeated tokens); in float32 it is made by index_add_ in the planned buffer, so
    a call no longer zero-fills a fresh host buffer of the whole 64 MiB weight (16,384
    page faults a call before)."""
    import resource

    torch.manual_seed(0)
    cpu = torch.nn.Embedding(65536, 256, padding_idx=3).to(dtype)
    emb = copy.deepcopy(cpu).to("neuron")
    ids = torch.tensor([[3, 7, 7, 65535], [0, 3, 9, 7]])
    scale = torch.randn(2, 4, 256).to(dtype)

    def f(ids, scale):
        return (emb(ids) * scale).sum()

    compiled = torch.compile(f, backend="neuron")
    grads = []
    for fn in (compiled, f, compiled, compiled):
        emb.weight.grad = None
        torch.neuron.synchronize()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fn(ids.to("neuron"), scale.to("neuron")).backward()
        torch.neuron.synchronize()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        grads.append(emb.weight.grad.cpu())
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[3], grads[1])
    (cpu(ids) * scale).sum().backward()
    torch.testing.assert_close(grads[1], cpu.weight.grad, **(TOL if dtype == torch.float32 else BF16_TOL))
    prog = programs()["backward"]
    assert prog["executor"] == "compiler", prog
    if dtype == torch.float32:
        assert faults < 2000, f"{faults} page faults in a warm compiled step"


def test_a_tied_embeddings_gradient_adds_its_rows_into_the_heads():
    """A tied embedding (the head's weight is the embedding's, as in TRL's benchmark
    model): its gradient is the head's product plus embedding_dense_backward. The
    program adds the embedding's rows into the head's gradient in place: no
    weight-sized fill, no add over the whole weight. Equal to eager (repeated tokens,
    the padding row) and to CPU."""
    torch.manual_seed(0)
    cpu = torch.nn.Embedding(4096, 64, padding_idx=3)
    emb = copy.deepcopy(cpu).to("neuron")
    ids = torch.tensor([[3, 7, 7, 4095], [0, 3, 9, 7]])

    def f(module, ids):
        logits = module(ids) @ module.weight.t()
        return logits.logsumexp(-1).sum()

    compiled = torch.compile(f, backend="neuron")
    grads = []
    for fn in (compiled, f):
        emb.weight.grad = None
        fn(emb, ids.to("neuron")).backward()
        grads.append(emb.weight.grad.cpu())
    f(cpu, ids).backward()
    torch.testing.assert_close(grads[0], grads[1], **TOL)
    torch.testing.assert_close(grads[0], cpu.weight.grad, **TOL)
    prog = programs()["backward"]
    assert prog["executor"] == "compiler", prog
    assert "aten::embedding_dense_backward.default" not in prog["extern_ops"], prog["extern_ops"]
    assert prog["native_kernels"] >= 1, prog


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_full_tensor_is_part_of_a_fused_group(dtype):
    """torch.full in the graph (aten::full) is a group member with no loads, not an extern call."""
    def f(x):
        return x * torch.full((4, 24), -1.25, dtype=x.dtype, device=x.device) + 0.5

    compiled = torch.compile(f, backend="neuron")
    x = torch.randn(4, 24).to(dtype)
    compiled(x.to("neuron"))
    got = one_submission(compiled, x.to("neuron"))
    torch.testing.assert_close(got.cpu(), f(x), **(TOL if dtype == torch.float32 else BF16_TOL))
    prog = programs()["inference"]
    assert prog["executor"] == "compiler" and prog["fused_groups"] == 1, prog
    assert "aten::full.default" not in prog["extern_ops"], prog


def test_full_like_is_a_fused_group_and_empty_does_no_work():
    """full_like (TRL's float32 gradient accumulators start as zeros) is a group
    member with no loads; an uninitialized tensor is its planned buffer, which
    the extern call leaves as it is (ATen's CPU kernel allocated fresh memory
    only to have it copied there)."""
    def f(x):
        e = torch.empty(x.shape, device=x.device)
        e.copy_(x * 2)
        return torch.full_like(x, 0.5) + x, torch.zeros_like(x.t()), e

    compiled = torch.compile(f, backend="neuron")
    x = torch.randn(8, 300)
    got = compiled(x.to("neuron"))
    for g, want in zip(got, f(x)):
        assert g.stride() == want.stride()
        torch.testing.assert_close(g.cpu(), want, **TOL)
    prog = programs()["inference"]
    assert prog["executor"] == "compiler", prog
    assert not any(op.startswith(("aten::full_like", "aten::zeros_like")) for op in prog["extern_ops"]), prog
