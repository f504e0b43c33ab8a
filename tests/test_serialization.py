"""torch.save / torch.load of neuron tensors, modules and state dicts."""
import io

import pytest
import torch
import torchneuron

D = "neuron"


def _saved(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _load(data, **kw):
    return torch.load(io.BytesIO(data), weights_only=True, **kw)


@pytest.fixture
def payload(two_cores):
    torch.manual_seed(0)
    base = torch.arange(12.0).view(3, 4)
    t0 = base.to("neuron:0")
    t1 = (base * 2).to("neuron:1")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(D)
    obj = {
        "t0": t0,
        "t1": t1,
        "view": t0[1:, ::2],  # a strided view sharing t0's storage
        "int": torch.tensor([1, -2, 3], dtype=torch.int64, device=D),
        "bf16": torch.linspace(0, 1, 5, device=D, dtype=torch.bfloat16),
        "bool": torch.tensor([True, False], device=D),
        "state": model.state_dict(),
    }
    ref = {k: (v.cpu() if torch.is_tensor(v) else {n: p.cpu() for n, p in v.items()})
           for k, v in obj.items()}
    return _saved(obj), ref


def _check_values(loaded, ref):
    for k, v in ref.items():
        if isinstance(v, dict):
            for n, p in v.items():
                assert loaded[k][n].dtype == p.dtype
                assert torch.equal(loaded[k][n].cpu(), p), (k, n)
        else:
            assert loaded[k].dtype == v.dtype, k
            assert torch.equal(loaded[k].cpu(), v), k


def test_load_without_map_location_keeps_devices(payload):
    data, ref = payload
    loaded = _load(data)
    assert loaded["t0"].device == torch.device("neuron:0")
    assert loaded["t1"].device == torch.device("neuron:1")
    assert loaded["view"].device == torch.device("neuron:0")
    assert loaded["state"]["0.weight"].device == torch.device("neuron:0")
    _check_values(loaded, ref)


def test_views_keep_sharing_storage(payload):
    data, _ = payload
    loaded = _load(data)
    view, base = loaded["view"], loaded["t0"]
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert view.stride() == (4, 2) and view.storage_offset() == 4
    base[2, 2] = 100.0
    assert view[1, 1].item() == 100.0


@pytest.mark.parametrize("where,expected", [
    ("neuron", "neuron:0"),
    ("neuron:1", "neuron:1"),
    (torch.device("neuron:1"), "neuron:1"),
    ("cpu", "cpu"),
], ids=["neuron", "neuron:1", "device", "cpu"])
def test_map_location(payload, where, expected):
    data, ref = payload
    loaded = _load(data, map_location=where)
    for k in ("t0", "t1", "view", "int", "bf16", "bool"):
        assert loaded[k].device == torch.device(expected), k
    assert loaded["state"]["1.bias"].device == torch.device(expected)
    _check_values(loaded, ref)


def test_map_location_dict_and_callable(payload):
    data, ref = payload
    loaded = _load(data, map_location={"neuron:1": "neuron:0"})
    assert loaded["t1"].device == torch.device("neuron:0")
    loaded = _load(data, map_location={"neuron:0": "cpu", "neuron:1": "cpu"})
    assert loaded["t0"].device.type == "cpu" and loaded["t1"].device.type == "cpu"
    loaded = _load(data, map_location=lambda storage, loc: storage)  # keep on CPU
    assert loaded["t1"].device.type == "cpu"
    _check_values(loaded, ref)


def test_cpu_checkpoint_to_neuron():
    model = torch.nn.Linear(5, 2)
    data = _saved(model.state_dict())
    sd = _load(data, map_location="neuron")
    assert all(v.device == torch.device("neuron:0") for v in sd.values())
    dev_model = torch.nn.Linear(5, 2).to(D)
    dev_model.load_state_dict(sd)
    x = torch.randn(3, 5)
    torch.testing.assert_close(dev_model(x.to(D)).cpu(), model(x))
    # load_state_dict from CPU tensors into a neuron module copies onto the device
    dev_model2 = torch.nn.Linear(5, 2).to(D)
    dev_model2.load_state_dict(model.state_dict())
    assert dev_model2.weight.device.type == D
    torch.testing.assert_close(dev_model2(x.to(D)).cpu(), model(x))


def test_module_round_trip_between_cores(two_cores):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 6)
    ref = model(x)
    m1 = model.to("neuron:1")
    assert all(p.device == torch.device("neuron:1") for p in m1.parameters())
    torch.testing.assert_close(m1(x.to("neuron:1")).cpu(), ref)
    m0 = m1.to("neuron:0")
    assert all(p.device == torch.device("neuron:0") for p in m0.parameters())
    torch.testing.assert_close(m0(x.to("neuron:0")).cpu(), ref)
    back = m0.cpu()
    torch.testing.assert_close(back(x), ref)


def test_whole_module_pickle(two_cores):
    model = torch.nn.Linear(3, 3).to("neuron:1")
    data = _saved(model)
    loaded = torch.load(io.BytesIO(data), weights_only=False)
    assert loaded.weight.device == torch.device("neuron:1")
    assert torch.equal(loaded.weight.detach().cpu(), model.weight.detach().cpu())
    loaded = torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")
    assert loaded.weight.device.type == "cpu"


def test_save_to_file(tmp_path, two_cores):
    t = torch.randn(7, device="neuron:1")
    path = tmp_path / "t.pt"
    torch.save(t, path)
    assert torch.equal(torch.load(path, weights_only=True).cpu(), t.cpu())
    assert torch.load(path, weights_only=True).device == torch.device("neuron:1")
    assert torch.load(path, map_location="neuron:0", weights_only=True).device.index == 0


def test_saving_waits_for_queued_work():
    x = torch.randn(200, 200, device=D)
    x @ x  # the first call of the signature may run synchronously; the next is queued

    # queued as the fallback's task or as one of the device's kernels (oneDNN's float32 GEMM)
    queued = sum(torchneuron.executed_ops()["aten::mm"].get(path, 0) for path in ("queue", "kernel"))
    y = x @ x  # still queued when torch.save reads the storage
    data = _saved(y)
    assert sum(torchneuron.executed_ops()["aten::mm"].get(path, 0) for path in ("queue", "kernel")) == queued + 1
    assert torch.equal(_load(data, map_location="cpu"), y.cpu())  # what the product left, once it ran


def test_load_to_out_of_range_core_is_a_clear_error():
    data = _saved(torch.ones(2, device=D))
    # PyTorch's own check for registered backends
    with pytest.raises(RuntimeError, match=r"NEURON device 5 but torch.neuron.device_count\(\) "
                                           r"is 2"):
        _load(data, map_location="neuron:5")
    assert _load(data, map_location="neuron:0").device.index == 0
