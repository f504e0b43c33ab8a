"""nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell on neuron against PyTorch on CPU:
outputs, final states and the gradients of the input, the initial states and
every parameter. Layers run as whole-layer autograd nodes
(csrc/aten/native/RecurrentLayers.cpp; float32 LSTM layers over full
sequences through oneDNN's LSTM primitive, as on CPU), cells through PyTorch's fused-cell ops
(_thnn_fused_lstm_cell, ...; csrc/aten/native/RecurrentCells.cpp), both on the
cell kernels of kernels/. Float32 must match CPU within float32 tolerances;
bfloat16 and float16 must be as close to a float64 evaluation as CPU's own
16-bit result (the device keeps gates in float32 within a step, CPU rounds
after every op, so neither is the reference for the other's last bits)."""
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

import torchneuron

pytestmark = [
    pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN"),
    # torch.backends.mkldnn.flags() sets the TF32 flag too and warns about it.
    pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN"),
]

D = "neuron"
LAYER_OP = "torchneuron::recurrent_layer"
LAYER_BWD = "torchneuron::recurrent_layer_backward"
ONEDNN_OP = "torchneuron::onednn_lstm_layer"
ONEDNN_BWD = "torchneuron::onednn_lstm_layer_backward"


def kernel_runs(op):
    return torchneuron.executed_ops().get(op, {}).get("kernel", 0)


def assert_matches(got, cpu, exact, what):
    assert got.shape == cpu.shape and got.dtype == cpu.dtype, what
    if got.dtype in (torch.float32, torch.float64):
        torch.testing.assert_close(got, cpu, msg=lambda m: f"{what}: {m}")
        return
    scale = exact.abs().max().item() if exact.numel() else 0.0
    device_error = (got.double() - exact).abs().max().item() if exact.numel() else 0.0
    cpu_error = (cpu.double() - exact).abs().max().item() if exact.numel() else 0.0
    floor = torch.finfo(got.dtype).eps * scale
    assert device_error <= 2 * cpu_error + floor, (what, device_error, cpu_error, floor)


def run(module, inputs, dtype, device, seed):
    """Forward and backward of `module` (a copy, moved to device and dtype) on
    `inputs` (a function of device and dtype returning the call's arguments and
    the tensors whose gradients count). Returns outputs and gradients as CPU
    tensors, in a fixed order."""
    m = module.to(device=device, dtype=dtype)
    args, leaves = inputs(device, dtype)
    result = m(*args)
    outs = []
    for r in result if isinstance(result, tuple) else (result,):
        if isinstance(r, PackedSequence):  # (a tuple too)
            outs.append(pad_packed_sequence(r)[0])
        elif isinstance(r, tuple):
            outs.extend(r)
        else:
            outs.append(r)
    g = torch.Generator().manual_seed(seed)
    # A random weighting of every output, so that each one's gradient flows.
    loss = sum((o * torch.randn(o.shape, generator=g).to(device=device, dtype=dtype)).sum()
               for o in outs)
    loss.backward()
    grads = [t.grad for t in leaves] + [p.grad for p in m.parameters()]
    return [t.detach().cpu() for t in outs + grads]


def compare(make_module, inputs, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    reference = make_module()
    state = reference.state_dict()

    def fresh():
        m = make_module()
        m.load_state_dict(state)
        return m

    cpu = run(fresh(), inputs, dtype, "cpu", seed)
    exact = run(fresh(), inputs, torch.float64, "cpu", seed)
    got = run(fresh(), inputs, dtype, D, seed)
    assert len(got) == len(cpu)
    for i, (n, c, e) in enumerate(zip(got, cpu, exact)):
        assert_matches(n, c, e, f"result {i}")


def seq_inputs(T, B, I, batch_first=False, states=None, seed=1):
    """Random [T, B, I] input (or [B, T, I]) and initial states of the given shapes."""
    def make(device, dtype):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn((B, T, I) if batch_first else (T, B, I), generator=g)
        x = x.to(device=device, dtype=dtype).requires_grad_()
        if states is None:
            return (x,), [x]
        hs = [torch.randn(s, generator=g).to(device=device, dtype=dtype).requires_grad_()
              for s in states]
        return (x, hs[0] if len(hs) == 1 else tuple(hs)), [x, *hs]
    return make


def packed_inputs(lengths, I, states=None, seed=2):
    def make(device, dtype):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(max(lengths), len(lengths), I, generator=g)
        x = x.to(device=device, dtype=dtype).requires_grad_()
        packed = pack_padded_sequence(x, torch.tensor(lengths), enforce_sorted=False)
        if states is None:
            return (packed,), [x]
        hs = [torch.randn(s, generator=g).to(device=device, dtype=dtype).requires_grad_()
              for s in states]
        return (packed, hs[0] if len(hs) == 1 else tuple(hs)), [x, *hs]
    return make


LSTM_CASES = {
    # name: (module kwargs, inputs)
    "one_layer": (dict(input_size=5, hidden_size=7), seq_inputs(6, 3, 5)),
    "two_layers_bidirectional_states": (
        dict(input_size=5, hidden_size=6, num_layers=2, bidirectional=True),
        seq_inputs(5, 3, 5, states=[(4, 3, 6), (4, 3, 6)])),
    "batch_first": (dict(input_size=4, hidden_size=6, num_layers=2, batch_first=True),
                    seq_inputs(5, 2, 4, batch_first=True)),
    "proj_size": (dict(input_size=4, hidden_size=8, proj_size=3, num_layers=2,
                       bidirectional=True),
                  seq_inputs(4, 3, 4, states=[(4, 3, 3), (4, 3, 8)])),
    "no_bias": (dict(input_size=4, hidden_size=5, bias=False), seq_inputs(4, 2, 4)),
    "packed_bidirectional": (dict(input_size=4, hidden_size=5, num_layers=2, bidirectional=True),
                             packed_inputs([5, 2, 4, 1], 4)),
    "packed_proj_states": (dict(input_size=3, hidden_size=6, proj_size=2),
                           packed_inputs([3, 4, 1], 3, states=[(1, 3, 2), (1, 3, 6)])),
    # dropout 1 zeroes the second layer's input on both devices alike.
    "dropout_one_training": (dict(input_size=4, hidden_size=5, num_layers=2, dropout=1.0),
                             seq_inputs(4, 2, 4)),
}

GRU_CASES = {
    "one_layer": (dict(input_size=5, hidden_size=7), seq_inputs(6, 3, 5)),
    "two_layers_bidirectional_states": (
        dict(input_size=5, hidden_size=6, num_layers=2, bidirectional=True, batch_first=True),
        seq_inputs(5, 3, 5, batch_first=True, states=[(4, 3, 6)])),
    "no_bias": (dict(input_size=4, hidden_size=5, bias=False), seq_inputs(4, 2, 4)),
    "packed_bidirectional": (dict(input_size=4, hidden_size=5, num_layers=2, bidirectional=True),
                             packed_inputs([5, 2, 4, 1], 4, states=[(4, 4, 5)])),
}


@pytest.mark.parametrize("onednn", [True, False], ids=["onednn_enabled", "onednn_disabled"])
@pytest.mark.parametrize("case", LSTM_CASES)
def test_lstm_matches_cpu(case, onednn):
    """Float32 LSTM layers whose sequences all have every step run CPU's own
    oneDNN primitive (as CPU does), unless the user disabled oneDNN
    (torch.backends.mkldnn), packed sequences of several lengths and
    projections the device's recurrence."""
    kwargs, inputs = LSTM_CASES[case]
    torchneuron.reset_executed_ops()
    with torch.backends.mkldnn.flags(enabled=onednn):
        compare(lambda: nn.LSTM(**kwargs), inputs)
    if onednn and "packed" not in case and "proj" not in case:
        ops = (ONEDNN_OP, ONEDNN_BWD)
    else:
        ops = (LAYER_OP, LAYER_BWD)
    assert kernel_runs(ops[0]) > 0 and kernel_runs(ops[1]) > 0, torchneuron.executed_ops()


@pytest.mark.parametrize("case", GRU_CASES)
def test_gru_matches_cpu(case):
    kwargs, inputs = GRU_CASES[case]
    torchneuron.reset_executed_ops()
    compare(lambda: nn.GRU(**kwargs), inputs)
    assert kernel_runs(LAYER_OP) > 0 and kernel_runs(LAYER_BWD) > 0, torchneuron.executed_ops()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", [("lstm", "two_layers_bidirectional_states"),
                                  ("lstm", "packed_proj_states"),
                                  ("gru", "two_layers_bidirectional_states"),
                                  ("gru", "packed_bidirectional")])
def test_16_bit_types_are_as_accurate_as_cpu(case, dtype):
    kind, name = case
    kwargs, inputs = (LSTM_CASES if kind == "lstm" else GRU_CASES)[name]
    compare(lambda: (nn.LSTM if kind == "lstm" else nn.GRU)(**kwargs), inputs, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_state", [False, True])
def test_cells_match_cpu(dtype, with_state):
    B, I, H = 3, 5, 6

    def inputs(states):
        return seq_inputs(1, B, I, states=states if with_state else None, seed=4)

    def squeeze(make):  # cells take [B, I]
        def f(device, dtype):
            args, leaves = make(device, dtype)
            x = leaves[0]
            return (x[0], *args[1:]), leaves
        return f

    torchneuron.reset_executed_ops()
    compare(lambda: nn.LSTMCell(I, H), squeeze(inputs([(B, H), (B, H)])), dtype=dtype)
    compare(lambda: nn.GRUCell(I, H), squeeze(inputs([(B, H)])), dtype=dtype)
    ops = torchneuron.executed_ops()
    for op in ["aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_lstm_cell_backward_impl",
               "aten::_thnn_fused_gru_cell", "aten::_thnn_fused_gru_cell_backward"]:
        assert ops.get(op, {}).get("kernel", 0) > 0, (op, ops)


@pytest.mark.parametrize("case", [("lstm", "two_layers_bidirectional_states"),
                                  ("lstm", "packed_proj_states"),
                                  ("gru", "packed_bidirectional")])
def test_float64_layers_match_cpu(case):
    # float64 goes to PyTorch's per-step composite, whose fused cells run as ATen ops
    kind, name = case
    kwargs, inputs = (LSTM_CASES if kind == "lstm" else GRU_CASES)[name]
    torchneuron.reset_executed_ops()
    compare(lambda: (nn.LSTM if kind == "lstm" else nn.GRU)(**kwargs), inputs, dtype=torch.float64)
    cell = "aten::_thnn_fused_lstm_cell" if kind == "lstm" else "aten::_thnn_fused_gru_cell"
    assert kernel_runs(cell) == 0 and kernel_runs(LAYER_OP) == 0


@pytest.mark.parametrize("with_state", [False, True])
def test_float64_cells_match_cpu(with_state):
    B, I, H = 3, 5, 6
    states = [(B, H), (B, H)] if with_state else None

    def cell_inputs(states):
        make = seq_inputs(1, B, I, states=states, seed=4)

        def f(device, dtype):
            args, leaves = make(device, dtype)
            return (leaves[0][0], *args[1:]), leaves
        return f

    compare(lambda: nn.LSTMCell(I, H), cell_inputs(states), dtype=torch.float64)
    compare(lambda: nn.GRUCell(I, H), cell_inputs(states[:1] if states else None),
            dtype=torch.float64)


def test_eval_without_grad_and_dropout_in_eval_mode():
    torch.manual_seed(0)
    m = nn.LSTM(4, 5, num_layers=2, dropout=0.5).eval()
    x = torch.randn(6, 2, 4)
    with torch.no_grad():
        want = m(x)
        got = m.to(D)(x.to(D))
    for w, g in zip([want[0], *want[1]], [got[0], *got[1]]):
        torch.testing.assert_close(g.cpu(), w)


def test_dropout_between_layers_in_training():
    torch.manual_seed(0)
    m = nn.GRU(4, 5, num_layers=2, dropout=0.5).to(D)
    x = torch.randn(6, 2, 4, device=D, requires_grad=True)
    torch.neuron.manual_seed(1)
    a = m(x)[0]
    torch.neuron.manual_seed(1)
    b = m(x)[0]
    torch.neuron.manual_seed(2)
    c = m(x)[0]
    no_dropout = m.eval()(x)[0]
    torch.testing.assert_close(a, b)  # the device's generator draws the mask
    assert not torch.equal(a, c) and not torch.equal(a, no_dropout)
    a.sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0


def test_zero_grad_of_unused_outputs_and_input_without_grad():
    torch.manual_seed(0)
    m = nn.LSTM(3, 4)
    x = torch.randn(5, 2, 3)
    _, (h, _) = m(x)
    h.sum().backward()
    want = [p.grad.clone() for p in m.parameters()]
    mn = nn.LSTM(3, 4).to(D)
    mn.load_state_dict(m.state_dict())
    _, (hn, _) = mn(x.to(D))
    hn.sum().backward()
    for w, p in zip(want, mn.parameters()):
        torch.testing.assert_close(p.grad.cpu(), w)


def test_one_tensor_as_both_initial_states_and_a_retained_graph_backward_twice():
    # oneDNN's kernel needs h0 and c0 in separate buffers; its workspace, held
    # by the node, serves every backward of a retained graph.
    torch.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2)
    x = torch.randn(5, 2, 3)
    s = torch.randn(2, 2, 4)
    grads = {}
    for device in ("cpu", D):
        md = nn.LSTM(3, 4, num_layers=2).to(device)
        md.load_state_dict(m.state_dict())
        xd = x.to(device).requires_grad_()
        sd = s.to(device).requires_grad_()
        y, _ = md(xd, (sd, sd))
        first = torch.autograd.grad(y.sum(), [xd, sd], retain_graph=True)
        second = torch.autograd.grad(y.sum(), [xd, sd])
        grads[device] = [t.cpu() for t in (y.detach(), *first, *second)]
    for c, n in zip(grads["cpu"], grads[D]):
        torch.testing.assert_close(n, c)


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
def test_double_backward_is_refused_clearly(kind):
    # As for cuDNN's RNNs: the layer's backward is one queued task, not a graph.
    m = kind(3, 4).to(D)
    x = torch.randn(2, 1, 3, device=D, requires_grad=True)
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        torch.autograd.grad(m(x)[0].sum(), x, create_graph=True)
    (gx,) = torch.autograd.grad(m(x)[0].sum(), x)  # a plain backward still works
    assert torch.isfinite(gx).all()


def test_mixed_devices_get_pytorchs_error():
    m = nn.LSTM(3, 4).to(D)
    with pytest.raises(RuntimeError, match="device|neuron|cpu"):
        torch.lstm(torch.randn(2, 1, 3, device=D),
                   (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4)),
                   list(m._flat_weights), True, 1, 0.0, False, False, False)


def _cell_args(B=2, H=3, dtype=torch.float32):
    ig = torch.randn(B, 4 * H, device=D, dtype=dtype)
    return ig, ig.clone(), torch.randn(B, H, device=D, dtype=dtype)


BAD_FUSED_CALLS = {
    "hidden_gates shape": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        torch.randn(2, 12, device=D), torch.randn(2, 8, device=D), torch.randn(2, 3, device=D)),
        r"_thnn_fused_lstm_cell: expected hidden_gates of shape \[2, 12\], got \[2, 8\]"),
    "cx on cpu": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        *_cell_args()[:2], torch.randn(2, 3)),
        r"_thnn_fused_lstm_cell: expected cx on neuron:0, got cpu"),
    "dtype mix": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        *_cell_args()[:2], torch.randn(2, 3, device=D, dtype=torch.bfloat16)),
        r"_thnn_fused_lstm_cell: expected cx of dtype Float, got BFloat16"),
    "integer dtype": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        *(torch.ones(2, n, device=D, dtype=torch.int64) for n in (12, 12, 3))),
        r"_thnn_fused_lstm_cell: expected input_gates of dtype float32, bfloat16, float16 or "
        r"float64, got Long"),
    "float64 cx float32": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        *_cell_args(dtype=torch.float64)[:2], torch.randn(2, 3, device=D)),
        r"_thnn_fused_lstm_cell: expected cx of dtype Double, got Float"),
    "gates not 4x": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        torch.randn(2, 10, device=D), torch.randn(2, 10, device=D), torch.randn(2, 3, device=D)),
        r"_thnn_fused_lstm_cell: input_gates has 10 columns, not a multiple of 4 gates"),
    "one bias": (lambda: torch.ops.aten._thnn_fused_lstm_cell(
        *_cell_args(), torch.randn(12, device=D), None),
        r"expected both input_bias and hidden_bias or neither"),
    "bias shape": (lambda: torch.ops.aten._thnn_fused_gru_cell(
        torch.randn(2, 9, device=D), torch.randn(2, 9, device=D), torch.randn(2, 3, device=D),
        torch.randn(8, device=D), torch.randn(8, device=D)),
        r"_thnn_fused_gru_cell: expected input_bias of shape \[9\], got \[8\]"),
    "gru hx shape": (lambda: torch.ops.aten._thnn_fused_gru_cell(
        torch.randn(2, 9, device=D), torch.randn(2, 9, device=D), torch.randn(3, 3, device=D)),
        r"_thnn_fused_gru_cell: expected hx of shape \[2, 3\], got \[3, 3\]"),
    "lstm backward cy": (lambda: torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
        torch.randn(2, 3, device=D), None, torch.randn(2, 3, device=D),
        torch.randn(2, 4, device=D), torch.randn(2, 12, device=D), True),
        r"_thnn_fused_lstm_cell_backward_impl: expected cy of shape \[2, 3\], got \[2, 4\]"),
    "gru backward workspace": (lambda: torch.ops.aten._thnn_fused_gru_cell_backward(
        torch.randn(2, 3, device=D), torch.randn(2, 14, device=D), True),
        r"_thnn_fused_gru_cell_backward: workspace has 14 columns, not a multiple of 5 gates"),
    "gru backward grad device": (lambda: torch.ops.aten._thnn_fused_gru_cell_backward(
        torch.randn(2, 3), torch.randn(2, 15, device=D), True),
        r"_thnn_fused_gru_cell_backward: expected grad_hy on neuron:0, got cpu"),
}


@pytest.mark.parametrize("case", BAD_FUSED_CALLS)
def test_fused_cell_ops_check_their_arguments(case):
    call, message = BAD_FUSED_CALLS[case]
    with pytest.raises(RuntimeError, match=message):
        call()
    # The device keeps working after the error.
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(*_cell_args())
    assert torch.isfinite(hy.cpu()).all() and ws.shape == (2, 12)


def test_fused_lstm_cell_direct_call_matches_the_definition():
    ig, hg, cx = _cell_args(B=4, H=5)
    bi, bh = torch.randn(20, device=D), torch.randn(20, device=D)
    hy, cy, ws = torch.ops.aten._thnn_fused_lstm_cell(ig, hg, cx, bi, bh)
    gates = (ig + hg + bi + bh).cpu().double()
    i, f, g, o = gates.chunk(4, 1)
    want_cy = f.sigmoid() * cx.cpu().double() + i.sigmoid() * g.tanh()
    torch.testing.assert_close(cy.cpu().double(), want_cy, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(hy.cpu().double(), o.sigmoid() * want_cy.tanh(), atol=1e-6,
                               rtol=1e-6)
    # Nothing flows back when neither output has a gradient.
    assert all(t is None for t in torch.ops.aten._thnn_fused_lstm_cell_backward_impl(
        None, None, cx, cy, ws, True))
