"""Autograd and training on neuron, compared with the same on CPU: gradients
of common models, optimizers (for-loop, foreach and fused implementations),
and a transformer block that learns."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchneuron

D = "neuron"

def _mlp():
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def _conv():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))


class _Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.ln = nn.LayerNorm(8)
        self.out = nn.Linear(8, 3)

    def forward(self, idx):
        return self.out(self.ln(self.emb(idx)).mean(1))


class _Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(12, 12)
        self.ln = nn.LayerNorm(12)
        self.bn = nn.BatchNorm1d(12)
        self.gn = nn.GroupNorm(3, 12)

    def forward(self, x):
        x = self.ln(F.gelu(self.lin(x)))
        return self.gn(self.bn(x)).softmax(-1)


def _inputs(kind, g):
    if kind == "mlp":
        return torch.randn(8, 10, generator=g), torch.randint(0, 3, (8,), generator=g)
    if kind == "conv":
        return torch.randn(4, 2, 6, 6, generator=g), torch.randint(0, 3, (4,), generator=g)
    if kind == "embedding":
        return torch.randint(0, 20, (6, 5), generator=g), torch.randint(0, 3, (6,), generator=g)
    return torch.randn(8, 12, generator=g), torch.randint(0, 12, (8,), generator=g)


MODELS = {"mlp": _mlp, "conv": _conv, "embedding": _Embed, "norms": _Norms}


def _grads(model):
    return {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("kind", ["mlp", "conv", "embedding", "norms"])
def test_backward_matches_cpu(kind):
    torch.manual_seed(0)
    model = MODELS[kind]()
    dev_model = copy.deepcopy(model).to(D)
    x, y = _inputs(kind, torch.Generator().manual_seed(1))
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    dev_loss = F.cross_entropy(dev_model(x.to(D)), y.to(D))
    dev_loss.backward()
    torch.testing.assert_close(dev_loss.cpu(), loss)
    for name, grad in _grads(model).items():
        dev_grad = _grads(dev_model)[name]
        assert dev_grad is not None and dev_grad.device.type == D, name
        torch.testing.assert_close(dev_grad.cpu(), grad, msg=lambda m: f"{name}: {m}")
    # BatchNorm running statistics are updated the same way
    for (name, buf), (_, dev_buf) in zip(model.named_buffers(), dev_model.named_buffers()):
        torch.testing.assert_close(dev_buf.cpu(), buf, msg=lambda m: f"{name}: {m}")


def test_input_gradients_and_graph_ops():
    a = torch.randn(5, 4, requires_grad=True)
    b = torch.randn(4, 3, requires_grad=True)
    an = a.detach().to(D).requires_grad_()
    bn = b.detach().to(D).requires_grad_()

    def f(a, b):
        h = (a @ b).sigmoid()
        return (h * h.flip(0)).sum() + a.norm() + torch.cat([a, a * 2]).max()

    f(a, b).backward()
    out = f(an, bn)
    out.backward()
    assert an.grad.device.type == D
    torch.testing.assert_close(an.grad.cpu(), a.grad)
    torch.testing.assert_close(bn.grad.cpu(), b.grad)
    # torch.autograd.grad with create_graph (double backward)
    x = torch.randn(6, requires_grad=True)
    xn = x.detach().to(D).requires_grad_()
    for t in (x, xn):
        (g,) = torch.autograd.grad((t ** 3).sum(), t, create_graph=True)
        (gg,) = torch.autograd.grad(g.sum(), t)
        t.gg = gg
    torch.testing.assert_close(xn.gg.cpu(), x.gg)


def test_gradient_accumulation_and_no_grad():
    lin = nn.Linear(4, 2)
    lin_n = copy.deepcopy(lin).to(D)
    x = torch.randn(3, 4)
    for m, dev in ((lin, "cpu"), (lin_n, D)):
        for _ in range(3):
            m(x.to(dev)).sum().backward()
    torch.testing.assert_close(lin_n.weight.grad.cpu(), lin.weight.grad)
    with torch.no_grad():
        y = lin_n(x.to(D))
    assert not y.requires_grad
    lin_n.zero_grad()
    assert lin_n.weight.grad is None


def test_backward_on_second_core_and_across_cores(two_cores):
    torch.manual_seed(0)
    model = _mlp()
    model1 = copy.deepcopy(model).to("neuron:1")
    x, y = _inputs("mlp", torch.Generator().manual_seed(4))
    F.cross_entropy(model(x), y).backward()
    F.cross_entropy(model1(x.to("neuron:1")), y.to("neuron:1")).backward()
    for (n, p), (_, p1) in zip(model.named_parameters(), model1.named_parameters()):
        assert p1.grad.device == torch.device("neuron:1"), n
        torch.testing.assert_close(p1.grad.cpu(), p.grad, msg=lambda m: f"{n}: {m}")
    # a graph that crosses from neuron:0 to neuron:1: each gradient on its input's core
    a = torch.randn(5)
    a0 = a.to("neuron:0").requires_grad_()
    (a0 * 2).to("neuron:1").pow(2).sum().backward()
    assert a0.grad.device == torch.device("neuron:0")
    torch.testing.assert_close(a0.grad.cpu(), 8 * a)
    assert torch.neuron.current_device() == 0


# ---- optimizers --------------------------------------------------------------

OPTIMIZERS = {
    "SGD": lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3, **kw),
    "Adam": lambda p, **kw: torch.optim.Adam(p, lr=1e-2, weight_decay=1e-3, **kw),
    "AdamW": lambda p, **kw: torch.optim.AdamW(p, lr=1e-2, weight_decay=1e-2, **kw),
}
IMPLS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def _train(model, opt, dev, steps, batches):
    losses = []
    for x, y in batches[:steps]:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack([loss.to("cpu") for loss in losses])


@pytest.mark.parametrize("impl", sorted(IMPLS))
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_cpu(name, impl):
    torch.manual_seed(0)
    model = _mlp()
    dev_model = copy.deepcopy(model).to(D)
    batches = [_inputs("mlp", torch.Generator().manual_seed(2))] * 5
    # the reference: the for-loop implementation on CPU (PyTorch's own fused and
    # foreach kernels are checked against it the same way)
    ref = _train(model, OPTIMIZERS[name](model.parameters(), foreach=False), "cpu", 5, batches)
    opt = OPTIMIZERS[name](dev_model.parameters(), **IMPLS[impl])
    torchneuron.reset_executed_ops()
    got = _train(dev_model, opt, D, 5, batches)
    fused_op = f"aten::_fused_{name.lower()}_"
    assert (fused_op in torchneuron.executed_ops()) == (impl == "fused")
    torch.testing.assert_close(got, ref)
    for (pname, p), (_, dp) in zip(model.named_parameters(), dev_model.named_parameters()):
        torch.testing.assert_close(dp.detach().cpu(), p.detach(), msg=lambda m: f"{pname}: {m}")
    # optimizer state lives on the device
    for state in opt.state.values():
        for k, v in state.items():
            if torch.is_tensor(v) and v.dim() > 0:
                assert v.device.type == D, k
    assert got[-1] < got[0]


def test_fused_optimizers_accept_neuron():
    # PyTorch allows fused=True for the PrivateUse1 backend (it lists the
    # backend's name among the devices with fused kernels); the fused kernels
    # then run through the fallback.
    from torch.optim.optimizer import _get_fused_kernels_supported_devices

    assert D in _get_fused_kernels_supported_devices()
    p = nn.Parameter(torch.randn(3, device=D))
    torch.optim.Adam([p], fused=True)  # no error
    with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
        torch.optim.Adam([p], fused=True, foreach=True)


def test_optimizer_state_dict_round_trip():
    torch.manual_seed(0)
    model = _mlp().to(D)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batches = [_inputs("mlp", torch.Generator().manual_seed(3)) for _ in range(4)]
    _train(model, opt, D, 2, batches)
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    assert saved_opt["state"][0]["exp_avg"].device.type == D
    after = _train(model, opt, D, 4, batches)[2:]
    model.load_state_dict(saved_model)
    opt.load_state_dict(saved_opt)
    again = _train(model, opt, D, 4, batches)[2:]
    torch.testing.assert_close(again, after, rtol=0, atol=0)


# ---- a transformer block trains ----------------------------------------------


def test_transformer_encoder_layer_trains_like_cpu():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                       batch_first=True)
    head = nn.Linear(16, 4)
    model = nn.ModuleDict({"layer": layer, "head": head})
    dev_model = copy.deepcopy(model).to(D)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 6, 16, generator=g)
    y = torch.randint(0, 4, (4,), generator=g)
    mask = nn.Transformer.generate_square_subsequent_mask(6)

    def step(m, opt, dev):
        opt.zero_grad()
        h = m["layer"](x.to(dev), src_mask=mask.to(dev), is_causal=True)
        loss = F.cross_entropy(m["head"](h.mean(1)), y.to(dev))
        loss.backward()
        opt.step()
        return loss.detach().to("cpu")

    # SGD, not Adam: the key projection's bias has an exactly zero gradient
    # (softmax ignores a constant added to every key), and Adam would turn the
    # rounding noise of that zero, different on any two backends, into steps.
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=0.1, momentum=0.9)
    ref = torch.stack([step(model, opt, "cpu") for _ in range(8)])
    got = torch.stack([step(dev_model, dev_opt, D) for _ in range(8)])
    torch.testing.assert_close(got, ref)
    assert got[-1] < got[0] * 0.9  # it learns
    for (n, p), (_, dp) in zip(model.named_parameters(), dev_model.named_parameters()):
        torch.testing.assert_close(dp.detach().cpu(), p.detach(), msg=lambda m: f"{n}: {m}")


def test_transformer_inference_fast_path():
    # eval + no_grad takes PyTorch's fused encoder path (_transformer_encoder_layer_fwd)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32,
                                       batch_first=True).eval()
    dev_layer = copy.deepcopy(layer).to(D)
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(dev_layer(x.to(D)).cpu(), layer(x))


def test_process_that_ends_right_after_backward_exits_cleanly(start_python):
    # The engine's neuron thread drops the graph task just after backward()
    # returns; without the exit hook in torchneuron._registration the
    # interpreter could be shutting down by then and the process aborted
    # (8 exits in 12 on the reference machine).
    code = """
        import torch
        x = torch.randn(4, 4, device="neuron", requires_grad=True)
        (x * 2).sum().backward()
        print(x.grad.shape[-1])
    """
    children = [start_python(code) for _ in range(4)]
    for child in children:
        assert child.wait(60).stdout.split() == ["4"]
