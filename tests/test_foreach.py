"""Foreach ops (`torch._foreach_*`, what optimizers' default multi-tensor paths
run) on neuron against PyTorch on CPU: every foreach OpInfo, functional and
in place, bit for bit, including lists with empty tensors; the functional ops
whose element op has an out= kernel write their fresh device outputs directly
(csrc/aten/ForeachElements.h); default optimizers' steps; foreach ops queued
together running as one pass over memory (csrc/aten/ForeachChain.h); errors."""
import pytest
import torch
import torchneuron
from torch.testing._internal.common_methods_invocations import (
    foreach_binary_op_db, foreach_other_op_db, foreach_pointwise_op_db, foreach_reduce_op_db,
    foreach_unary_op_db)
from torch.utils._pytree import tree_map

D = "neuron"
FOREACH_OPS = (foreach_unary_op_db + foreach_binary_op_db + foreach_pointwise_op_db
               + foreach_reduce_op_db + foreach_other_op_db)
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64)


def to(device):
    return lambda x: x.to(device) if isinstance(x, torch.Tensor) else x


def run(fn, sample, device):
    """fn on a copy of (input, args, kwargs) on `device`; returns (result, input)."""
    inputs, args, kwargs = tree_map(to(device), sample)
    return fn(inputs, *args, **kwargs), inputs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", FOREACH_OPS, ids=lambda op: op.name)
def test_foreach_opinfo_equals_cpu(op, dtype):
    if dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"{op.name} has no CPU kernel for {dtype}")
    checked = refused = 0
    # Samples made on the device include lists with empty tensors interspersed
    # (PyTorch makes those only for accelerators).
    for sample in op.sample_inputs(D, dtype, num_input_tensors=[5]):
        plain = (sample.input, list(sample.args), dict(sample.kwargs))
        for fn in (op.op, op.inplace_variant):
            if fn is None:
                continue
            try:
                want, cpu_input = run(fn, plain, "cpu")
            except (RuntimeError, TypeError) as exc:
                with pytest.raises(type(exc)):
                    run(fn, plain, D)
                assert torch.ones(2, device=D).sum().item() == 2.0  # the device still works
                refused += 1
                continue
            torchneuron.reset_executed_ops()
            got, dev_input = run(fn, plain, D)
            ops = torchneuron.executed_ops()
            # the loop over the tensors is one queued op, not one op per tensor
            assert [name for name in ops if name.startswith("aten::_foreach_")] == list(ops)[:1], ops
            torch.testing.assert_close(tree_map(to("cpu"), got), want, rtol=0, atol=0, equal_nan=True)
            torch.testing.assert_close(tree_map(to("cpu"), dev_input), cpu_input, rtol=0, atol=0, equal_nan=True)
            if not fn.__name__.endswith("_"):  # a functional op: its outputs are its own
                inputs = {t.data_ptr() for t in dev_input if t.numel()}
                assert all(t.device.type == D and t.data_ptr() not in inputs for t in got if t.numel())
            checked += 1
    assert checked + refused


def test_functional_foreach_outputs_are_fresh_and_independent():
    xs = [torch.rand(4, 5, device=D) + 0.5, torch.rand(0, device=D), torch.rand(33, device=D)]
    roots = torch._foreach_sqrt(xs)
    torch._foreach_add_(roots, 1.0)  # writing the results leaves the inputs alone
    for x, r in zip(xs, roots):
        assert r.shape == x.shape and r.dtype == x.dtype
        torch.testing.assert_close(r.cpu(), x.cpu().sqrt() + 1.0, rtol=0, atol=0)
    big = [torch.randn(1 << 20, device=D), torch.randn(3, 1 << 18, device=D)]  # split between threads
    sums = torch._foreach_add(big, big, alpha=-0.5)
    for b, s in zip(big, sums):
        torch.testing.assert_close(s.cpu(), torch.add(b.cpu(), b.cpu(), alpha=-0.5), rtol=0, atol=0)


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adam_l2_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "adam_maximize": lambda ps: torch.optim.Adam(ps, lr=1e-2, maximize=True),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.01),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=1e-2, weight_decay=0.01),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_default_optimizer_steps_equal_cpu_foreach(name):
    # On neuron the optimizers' default is their foreach path (PyTorch lists the
    # PrivateUse1 device with CUDA's); CPU runs the same path when asked.
    g = torch.Generator().manual_seed(0)
    shapes = [(8, 5), (5,), (3, 4, 2)]
    cpu = [torch.randn(s, generator=g, requires_grad=True) for s in shapes]
    dev = [p.detach().to(D).requires_grad_() for p in cpu]
    opt_cpu, opt_dev = OPTIMIZERS[name](cpu), OPTIMIZERS[name](dev)
    for group in opt_cpu.param_groups:
        group["foreach"] = True
    for step in range(3):
        grads = [torch.randn(s, generator=g) for s in shapes]
        for p, q, gr in zip(cpu, dev, grads):
            p.grad, q.grad = gr, gr.to(D)
        opt_cpu.step()
        opt_dev.step()
    for p, q in zip(cpu, dev):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=0, atol=0)


def test_foreach_errors_name_the_op_and_the_device_keeps_working():
    a, b = torch.ones(2, device=D), torch.ones(3, device=D)
    with pytest.raises(RuntimeError, match="same number of tensors|must have the same length|size"):
        torch._foreach_add([a, b], [a])
    with pytest.raises(RuntimeError, match="neuron|cpu|device"):
        torch._foreach_mul([a, b], [torch.ones(2), torch.ones(3)])
    assert [t.cpu().tolist() for t in torch._foreach_mul([a, b], 2.0)] == [[2.0] * 2, [2.0] * 3]


def keep_device_busy():
    """Queues ~50 ms of matrix products, so that the ops issued next wait in
    the stream's queue together."""
    a = torch.randn(1536, 1536, device=D)
    for _ in range(3):
        a = a @ a
        a = a / a.norm()


def chained(name):
    return torchneuron.executed_ops().get(name, {}).get("chained", 0)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=str)
def test_queued_optimizer_step_runs_as_one_pass_equal_to_cpu(dtype):
    # Sizes larger than a piece (several pieces, the last one not a whole
    # number of vectors), small and empty tensors that share a piece.
    g = torch.Generator().manual_seed(0)
    shapes = [(300_001,), (257, 1031), (5,), (0,), (64, 64), (3,)]
    cpu = [torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes]
    dev = [p.detach().to(D).requires_grad_() for p in cpu]
    opt_cpu = torch.optim.AdamW(cpu, lr=1e-2, weight_decay=0.1, foreach=True)
    opt_dev = torch.optim.AdamW(dev, lr=1e-2, weight_decay=0.1)
    for step in range(3):
        grads = [torch.randn(s, generator=g).to(dtype) for s in shapes]
        for p, q, gr in zip(cpu, dev, grads):
            p.grad, q.grad = gr, gr.to(D)
        torchneuron.reset_executed_ops()
        keep_device_busy()
        opt_cpu.step()
        opt_dev.step()
        torch.neuron.synchronize()
        if step > 0:  # the first step validates each op's signature synchronously
            for op in ("aten::_foreach_lerp_.Scalar", "aten::_foreach_addcmul_.Scalar", "aten::_foreach_sqrt",
                       "aten::_foreach_div_.ScalarList", "aten::_foreach_addcdiv_.ScalarList"):
                assert chained(op) == 1, (op, torchneuron.executed_ops())
    for p, q in zip(cpu, dev):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=0, atol=0)
        torch.testing.assert_close(opt_dev.state[q]["exp_avg_sq"].cpu(), opt_cpu.state[p]["exp_avg_sq"],
                                   rtol=0, atol=0)


def test_foreach_ops_whose_positions_share_memory_are_not_chained():
    # Run piece by piece, an op over overlapping tensors at two list positions
    # would read what the other position wrote in another order than ATen's
    # loop over the tensors does: such ops run on their own.
    base = torch.arange(200, dtype=torch.float32)
    x = base.to(D)
    swapped_cpu = [base[:100].clone(), base[100:].clone()]
    swapped = [t.to(D) for t in swapped_cpu]
    for first in range(2):  # the first run of each signature is synchronous
        torchneuron.reset_executed_ops()
        keep_device_busy()
        torch._foreach_mul_([x[:100], x[50:150]], 1.0)
        torch._foreach_add_([x[:100], x[50:150]], 1.0)  # overlapping positions
        torch._foreach_mul_(swapped, 1.0)
        torch._foreach_sub_(swapped[:1], 0.0)  # another number of tensors
        torch._foreach_add_(swapped, swapped[::-1])  # each position reads the other one
        torch.neuron.synchronize()
    ops = torchneuron.executed_ops()
    assert chained("aten::_foreach_add_.Scalar") == chained("aten::_foreach_add_.List") == 0, ops
    assert chained("aten::_foreach_sub_.Scalar") == 0 and ops["aten::_foreach_sub_.Scalar"]["queue"] == 1, ops
    want = base.clone()
    for _ in range(2):
        torch._foreach_add_([want[:100], want[50:150]], 1.0)
        torch._foreach_add_(swapped_cpu, swapped_cpu[::-1])
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)
    for got, w in zip(swapped, swapped_cpu):
        torch.testing.assert_close(got.cpu(), w, rtol=0, atol=0)


def test_foreach_ops_run_one_by_one_while_profiling():
    from torch.profiler import ProfilerActivity, profile

    xs = [torch.randn(1000, device=D) for _ in range(3)]
    torch._foreach_mul_(xs, 0.5)
    torch._foreach_add_(xs, 1.0)
    torch.neuron.synchronize()
    torchneuron.reset_executed_ops()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        keep_device_busy()
        torch._foreach_mul_(xs, 0.5)
        torch._foreach_add_(xs, 1.0)
        torch.neuron.synchronize()
    assert chained("aten::_foreach_add_.Scalar") == 0, torchneuron.executed_ops()
    device_ops = {e.key for e in prof.key_averages() if e.self_device_time_total > 0}
    assert {"aten::_foreach_mul_.Scalar", "aten::_foreach_add_.Scalar"} <= device_ops, device_ops
