"""torch.neuron calls inside torch.compile'd code: no graph break, no stale value.

Hugging Face and user code query the device inside forward functions
(`torch.neuron.is_available()`, `device_count()`, `current_device()`). Dynamo
cannot trace the pybind calls behind them, so without help each one would end
the graph there (compile/registration.py, hook 4).
"""
import warnings

import pytest
import torch
import torch._dynamo

import torchneuron


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def test_process_constants_fold_into_one_graph():
    def f(x):
        n = torch.neuron.device_count() + torch.neuron.is_available() + torch.neuron.is_bf16_supported()
        name = torch.neuron.get_device_name()
        return x.sin() * n + len(name)

    x = torch.arange(4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Dynamo warns when it cannot trace a builtin
        got = torch.compile(f, backend="neuron")(x.to("neuron")).cpu()
    n = torch.neuron.device_count() + 2
    torch.testing.assert_close(got, x.sin() * n + len(torch.neuron.get_device_name()))
    assert len(torchneuron.compile_metrics()) == 1, "the graph broke at a torch.neuron call"


@pytest.mark.skipif(torch.neuron.device_count() < 2, reason="needs two cores (NEURON_RT_NUM_CORES=2)")
def test_current_device_is_guarded_not_stale():
    def f(x):
        return x + torch.neuron.current_device()

    g = torch.compile(f, backend="neuron")
    x = torch.zeros(2, device="neuron:0")
    try:
        assert g(x).cpu().tolist() == [0.0, 0.0]
        torch.neuron.set_device(1)
        assert g(x).cpu().tolist() == [1.0, 1.0]
        torch.neuron.set_device(0)
        assert g(x).cpu().tolist() == [0.0, 0.0]
    finally:
        torch.neuron.set_device(0)
    records = torchneuron.compile_metrics()
    assert len(records) == 2, [r["recompile_reason"] for r in records]  # one per device index
    assert "current_device_index" in records[1]["recompile_reason"]


def test_rng_state_calls_run_eagerly_inside_compiled_code():
    """PyTorch's freeze_rng_state (OpInfo's wrapper_set_seed uses it) saves and
    restores the device's RNG state under no_dispatch around the op."""
    from torch.testing._utils import wrapper_set_seed

    def f(x):
        return wrapper_set_seed(torch.nn.functional.relu, x) + 1

    torch.neuron.manual_seed(7)
    before = torch.neuron.get_rng_state()
    x = torch.randn(5)
    got = torch.compile(f, backend="neuron")(x.to("neuron")).cpu()
    torch.testing.assert_close(got, x.relu() + 1)
    assert torch.equal(torch.neuron.get_rng_state(), before), "the RNG state was not restored"
