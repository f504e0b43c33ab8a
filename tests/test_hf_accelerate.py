"""Accelerate on neuron, as a user's training loop calls it: `Accelerator()` with no
arguments picks neuron (hf_integration adaptation 1), `prepare`, `backward` and
the optimizer step give CPU's (`Accelerator(cpu=True)`) numbers, in float32 and
with `mixed_precision="bf16"`; `save_state` / `load_state` resume a loop to the
same losses (the neuron generators included); `gather` in one process."""
import pytest
import torch

import torchneuron  # noqa: F401

from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import set_seed

D = "neuron"


@pytest.fixture(autouse=True)
def fresh_state():
    """Accelerate keeps one process-wide state; each test (and the next file) starts anew."""
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def make_loop(accelerator, dropout=0.0):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Dropout(dropout),
                                torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
    y = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    return accelerator.prepare(model, opt, loader)


def steps(accelerator, model, opt, batches):
    losses = []
    for x, y in batches:
        assert x.device.type == accelerator.device.type
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return torch.tensor(losses)


def run(accelerator):
    model, opt, loader = make_loop(accelerator)
    losses = steps(accelerator, model, opt, loader)
    weights = {n: p.detach().cpu() for n, p in accelerator.unwrap_model(model).named_parameters()}
    return losses, weights


@pytest.mark.parametrize("mixed_precision", [None, "bf16"])
def test_prepare_backward_step_match_cpu(mixed_precision):
    kwargs = {} if mixed_precision is None else {"mixed_precision": mixed_precision}
    cpu = Accelerator(cpu=True, **kwargs)
    assert cpu.device.type == "cpu"
    want, want_weights = run(cpu)
    AcceleratorState._reset_state(reset_partial_state=True)

    acc = Accelerator(**kwargs)
    assert acc.device == torch.device(D)  # no index in one process, as Accelerate gives torch.device("cuda")
    assert acc.mixed_precision == (mixed_precision or "no")
    assert acc.native_amp == (mixed_precision == "bf16")
    got, got_weights = run(acc)
    # bf16 autocast rounds the linear layers to bfloat16 in a different order on each device.
    tol = {} if mixed_precision is None else dict(atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(got, want, **tol)
    for name in want_weights:
        torch.testing.assert_close(got_weights[name], want_weights[name], **(tol or dict(atol=1e-5, rtol=1e-4)))


def test_bf16_autocasts_on_the_device():
    acc = Accelerator(mixed_precision="bf16")
    model, _, loader = make_loop(acc)
    x, _ = next(iter(loader))
    with acc.autocast():
        inner = acc.unwrap_model(model)[0](x)
    assert inner.device.type == D and inner.dtype == torch.bfloat16
    assert model(x).dtype == torch.float32  # prepare() hands the outputs back in float32


def test_save_state_load_state_resume_to_the_same_losses(tmp_path):
    acc = Accelerator()
    set_seed(0)
    model, opt, loader = make_loop(acc, dropout=0.5)  # dropout draws from the neuron generator
    batches = list(loader)
    first = steps(acc, model, opt, batches[:2])
    acc.save_state(tmp_path / "state")
    uninterrupted = steps(acc, model, opt, batches[2:])

    states = torch.load(tmp_path / "state" / "random_states_0.pkl", weights_only=False)  # torch.save'd
    assert "torch_neuron_manual_seed" in states  # Accelerate's own key, with adaptation 1

    AcceleratorState._reset_state(reset_partial_state=True)
    acc = Accelerator()
    set_seed(1)  # other generators and weights: load_state must restore all of them
    model, opt, loader = make_loop(acc, dropout=0.5)
    steps(acc, model, opt, list(loader)[:1])
    acc.load_state(tmp_path / "state")
    resumed = steps(acc, model, opt, batches[2:])
    assert len(first) == 2
    torch.testing.assert_close(resumed, uninterrupted, atol=0, rtol=0)


def test_gather_in_one_process():
    acc = Accelerator()
    assert acc.num_processes == 1
    x = torch.arange(6, dtype=torch.float32, device=acc.device).view(2, 3)
    gathered = acc.gather(x)
    assert gathered.device.type == D and torch.equal(gathered.cpu(), x.cpu())
    nested = acc.gather({"a": x, "b": [x[0]]})
    assert torch.equal(nested["a"].cpu(), x.cpu()) and torch.equal(nested["b"][0].cpu(), x[0].cpu())
    assert torch.equal(acc.reduce(x, reduction="sum").cpu(), x.cpu())
    assert torch.equal(acc.gather_for_metrics(x).cpu(), x.cpu())
    padded = acc.pad_across_processes(x, dim=1)
    assert torch.equal(padded.cpu(), x.cpu())
