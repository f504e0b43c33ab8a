"""torch.compile on neuron: the Dynamo backend "neuron" (python/torchneuron/compile/).

In the style of PyTorch's own backend tests: each compiled result is compared
with a reference run eagerly (PyTorch on CPU, or neuron eager where the device
is the point: RNG, in-place state), and recompilations are counted
(compile_metrics(), one record per compilation). The AOTAutograd graphs run as
programs of the graph compiler (docs/compile.md; its own checks are in
tests/test_compiler.py), so results equal eager neuron up to rounding and CPU
up to the usual tolerance.
"""
import copy
import importlib.metadata
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch._dynamo

import torchneuron
from torchneuron.compile.backend import NeuronCompileError

ROOT = Path(__file__).resolve().parents[1]
TOL = dict(rtol=1e-5, atol=1e-5)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def records():
    return torchneuron.compile_metrics()


class Block(torch.nn.Module):
    """The fusable ops the decomposition table keeps whole: addmm, layer norm, GELU, softmax, embedding."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, ids):
        h = torch.nn.functional.gelu(self.norm(self.fc1(self.emb(ids))))
        return self.fc2(h).softmax(-1)


def pair(module):
    """(neuron copy, CPU copy) with equal weights."""
    torch.manual_seed(0)
    cpu = module()
    return copy.deepcopy(cpu).to("neuron"), cpu


# ------------------------------------------------------------ forward / training


def test_module_forward_matches_cpu():
    model, cpu = pair(Block)
    ids = torch.randint(0, 16, (3, 5))
    with torch.no_grad():
        got = torch.compile(model, backend="neuron")(ids.to("neuron"))
    torch.testing.assert_close(got.cpu(), cpu(ids), **TOL)
    (record,) = records()
    assert record["nodes"]["inference"]["extern"] > 0


def test_function_matches_cpu():
    def f(x, y):
        return torch.tanh(x @ y.t()).sum(-1) * 2 + x.mean()

    x, y = torch.randn(4, 3), torch.randn(5, 3)
    got = torch.compile(f, backend="neuron", fullgraph=True)(x.to("neuron"), y.to("neuron"))
    torch.testing.assert_close(got.cpu(), f(x, y), **TOL)


def test_training_gradients_equal_eager():
    model, cpu = pair(Block)
    ids = torch.randint(0, 16, (3, 5))
    target = torch.randn(3, 5, 4)
    compiled = torch.compile(model, backend="neuron")
    loss = ((compiled(ids.to("neuron")) - target.to("neuron")) ** 2).mean()
    loss.backward()
    ref = ((cpu(ids) - target) ** 2).mean()
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref, **TOL)
    for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL, msg=name)
    (record,) = records()
    assert set(record["nodes"]) == {"forward", "backward"}
    assert "executor_backward" in record["times_ms"]


# ------------------------------------------------------------ graph breaks, recompiles


def with_break(x):
    y = x.sin() * 2
    torch._dynamo.graph_break()
    return y.cos() + 1


def test_graph_break_runs_both_graphs():
    x = torch.randn(6)
    got = torch.compile(with_break, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(got.cpu(), with_break(x), **TOL)
    assert len(records()) == 2


def test_fullgraph_refuses_a_graph_break():
    with pytest.raises(torch._dynamo.exc.Unsupported, match="graph_break"):
        torch.compile(with_break, backend="neuron", fullgraph=True)(torch.randn(6, device="neuron"))


def test_recompiles_on_a_new_shape_only():
    f = torch.compile(lambda x: x.relu() + 1, backend="neuron")
    f(torch.randn(4, 3, device="neuron"))
    f(torch.randn(4, 3, device="neuron"))
    assert len(records()) == 1  # a repeat reuses the graph
    f(torch.randn(7, 3, device="neuron"))
    first, second = records()
    assert first["recompile_reason"] is None
    assert "size mismatch" in second["recompile_reason"], second["recompile_reason"]
    assert second["compile_id"] != first["compile_id"]


def test_dynamic_true_compiles_once_for_many_shapes():
    f = torch.compile(lambda x: (x * 2).softmax(-1), backend="neuron", dynamic=True)
    for n in (2, 3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x.to("neuron")).cpu(), (x * 2).softmax(-1), **TOL)
    assert len(records()) == 1


# ------------------------------------------------------------ mutation, aliasing, RNG


def test_input_mutation_updates_batchnorm_buffers():
    model, cpu = pair(lambda: torch.nn.BatchNorm1d(4))
    x = torch.randn(8, 4)
    compiled = torch.compile(model, backend="neuron")
    for _ in range(2):
        got = compiled(x.to("neuron"))
        ref = cpu(x)
    torch.testing.assert_close(got.cpu(), ref, **TOL)
    torch.testing.assert_close(model.running_mean.cpu(), cpu.running_mean, **TOL)
    torch.testing.assert_close(model.running_var.cpu(), cpu.running_var, **TOL)
    assert model.num_batches_tracked.item() == 2


def test_in_place_update_of_an_input():
    def f(cache, x):
        cache.index_copy_(0, torch.tensor([1], device=x.device), x)
        return cache.sum()

    cache, x = torch.zeros(3, 2), torch.ones(1, 2)
    dev = cache.to("neuron")
    got = torch.compile(f, backend="neuron")(dev, x.to("neuron"))
    assert got.item() == f(cache, x).item()
    torch.testing.assert_close(dev.cpu(), cache)


def test_outputs_alias_inputs():
    f = torch.compile(lambda x: (x.view(-1), x.t(), x + 1), backend="neuron")
    x = torch.randn(2, 3, device="neuron")
    flat, t, _ = f(x)
    assert flat._base is x and t._base is x
    x.add_(1)  # the views see the caller's tensor
    torch.testing.assert_close(flat.cpu(), x.cpu().view(-1))


def test_gradients_of_separate_tangents_that_share_a_traced_storage():
    """unbind's outputs are views of one tensor, so AOTAutograd traces their
    tangents over one storage; the caller's gradients are separate tensors."""
    x = torch.randn(5, device="neuron", requires_grad=True)
    outs = torch.compile(lambda x: torch.unbind(x), backend="neuron")(x)
    grads = [torch.randn(()) for _ in outs]
    (got,) = torch.autograd.grad(outs, x, [g.to("neuron") for g in grads])
    assert torch.equal(got.cpu(), torch.stack(grads))
    assert all(r["programs"]["backward"]["executor"] == "compiler" for r in records())


def test_outputs_that_view_an_input_as_another_dtype():
    """torch.complex's backward returns the real and imaginary parts of the
    complex tangent: float32 views of a complex64 input, also at an offset."""
    r, i = (torch.randn(3, requires_grad=True) for _ in range(2))
    f = torch.compile(lambda r, i: torch.complex(r, i), backend="neuron")
    rd, id_ = (t.detach().to("neuron").requires_grad_() for t in (r, i))
    g_dev = torch.randn(4, dtype=torch.complex64).to("neuron")[1:]  # a tangent at storage offset 1
    g = g_dev.cpu()
    got = torch.autograd.grad(f(rd, id_), (rd, id_), g_dev)
    want = torch.autograd.grad(torch.complex(r, i), (r, i), g)
    for a, b in zip(got, want):
        assert a.dtype == torch.float32 and torch.equal(a.cpu(), b)
    real = torch.compile(lambda z: torch.view_as_real(z)[:, 1], backend="neuron")(g_dev)
    assert torch.equal(real.cpu(), g.imag)


def test_a_complex128_value_is_refused_as_eagerly():
    x = torch.randn(3, device="neuron")
    with pytest.raises(TypeError, match="ComplexDouble is not supported on neuron"):
        x.cdouble()
    with pytest.raises(TypeError, match="ComplexDouble is not supported on neuron"):
        torch.compile(lambda x: x.cdouble() * 2, backend="neuron")(x)
    assert torch.compile(lambda x: x + 1, backend="neuron")(x).cpu().equal(x.cpu() + 1)


def test_dropout_is_reproducible_under_manual_seed():
    drop = torch.nn.Dropout(0.5)
    f = torch.compile(lambda x: drop(x) * 3, backend="neuron")
    x = torch.ones(1000, device="neuron")
    torch.manual_seed(7)
    a = f(x).cpu()
    torch.manual_seed(7)
    b = f(x).cpu()
    torch.manual_seed(8)
    c = f(x).cpu()
    torch.manual_seed(7)
    eager = (drop(x) * 3).cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(a, eager)  # the device generator, drawn as eager draws
    assert 0.4 < (a == 0).float().mean() < 0.6
    assert all(p["executor"] == "compiler" for r in records() for p in r["programs"].values())


class CheckpointedNet(torch.nn.Module):
    """Two residual blocks with dropout, each under torch.utils.checkpoint with
    preserve_rng_state (what Transformers' gradient checkpointing does to a
    decoder layer), and one dropout outside them."""

    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.25), torch.nn.Linear(32, 16))
            for _ in range(2))
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        for block in self.blocks:
            x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False, preserve_rng_state=True)
        return self.drop(x).square().mean()


def test_checkpointed_training_step_with_dropout_runs_as_programs_and_equals_eager():
    """AOTAutograd wraps the recomputed dropout in run_and_save_rng_state (forward)
    and run_with_rng_state (backward): the generator state is a value of the
    programs, so both graphs run as programs; the backward redraws the forward's
    masks without moving the device generator. Losses, gradients and the
    generator state afterwards equal the device's eager run, and losses and
    gradients equal CPU's (the device generator is torch's CPU one, seeded alike)."""
    torch.manual_seed(0)
    cpu = CheckpointedNet()
    eager = copy.deepcopy(cpu).to("neuron")
    compiled_model = copy.deepcopy(cpu).to("neuron")
    compiled = torch.compile(compiled_model, backend="neuron")
    x = torch.randn(8, 16)
    for seed in (1, 2):
        results = []
        for model, f, device in ((cpu, cpu, "cpu"), (eager, eager, "neuron"), (compiled_model, compiled, "neuron")):
            model.zero_grad()
            torch.manual_seed(seed)
            loss = f(x.to(device))
            loss.backward()
            state = torch.neuron.get_rng_state() if device == "neuron" else None
            results.append((loss.detach().cpu(), [p.grad.cpu() for p in model.parameters()], state))
        (cpu_loss, cpu_grads, _), (eager_loss, eager_grads, eager_state), (loss, grads, state) = results
        torch.testing.assert_close(loss, eager_loss, **TOL)
        torch.testing.assert_close(loss, cpu_loss, **TOL)
        for g, e, c in zip(grads, eager_grads, cpu_grads):
            torch.testing.assert_close(g, e, **TOL)
            torch.testing.assert_close(g, c, **TOL)
        assert torch.equal(state, eager_state)  # the backward drew nothing from the device generator
    (record,) = records()
    programs = record["programs"]
    assert set(programs) == {"forward", "backward"}
    assert all(p["executor"] == "compiler" for p in programs.values()), programs
    assert programs["forward"]["extern_ops"]["torchneuron::generator_state.default"] == 2
    assert programs["backward"]["extern_ops"]["torchneuron::bernoulli_with_state.default"] == 2


def test_checkpointed_backward_program_takes_the_state_an_eager_forward_saved():
    """A forward that runs eagerly (here: rand_like, which has no generator
    argument) saves the generator state as a CPU tensor; the backward program
    takes it on the device and redraws the forward's dropout mask."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.25), torch.nn.Linear(32, 16))
    x = torch.randn(8, 16)

    def step(block, compile_):
        def f(x):
            y = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False, preserve_rng_state=True)
            return (y * torch.rand_like(y)).square().mean()

        torch.manual_seed(3)
        loss = (torch.compile(f, backend="neuron") if compile_ else f)(x.to("neuron"))
        loss.backward()
        return loss.detach().cpu(), [p.grad.cpu() for p in block.parameters()]

    eager_loss, eager_grads = step(copy.deepcopy(cpu).to("neuron"), False)
    loss, grads = step(copy.deepcopy(cpu).to("neuron"), True)
    torch.testing.assert_close(loss, eager_loss, **TOL)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, **TOL)
    (record,) = records()
    assert record["programs"]["forward"]["executor"] == "eager"
    assert "rand_like" in record["programs"]["forward"]["reason"]
    assert record["programs"]["backward"]["executor"] == "compiler"


def test_an_op_whose_decomposition_reads_values_runs_its_graph_eagerly():
    """take with a 0-dim index and index_put with a boolean mask decompose, under
    AOTAutograd, into ops that read tensor values (.item(), nonzero): the graph
    cannot be a static program, so it runs eagerly, recorded with the reason,
    equal to CPU, with gradients; the default fallback='raise' is not involved."""
    def f(x, flat, mask, values):
        return x.take(flat) * x.index_put((mask,), values).sin()

    x = torch.randn(5, 3, requires_grad=True)
    flat, mask, values = torch.tensor(4), torch.tensor([True, False, True, False, True]), torch.randn(3)
    expected = f(x, flat, mask, values)
    expected.sum().backward()
    xd = x.detach().to("neuron").requires_grad_()
    got = torch.compile(f, backend="neuron")(xd, flat.to("neuron"), mask.to("neuron"), values.to("neuron"))
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), expected.detach(), **TOL)
    torch.testing.assert_close(xd.grad.cpu(), x.grad, **TOL)
    (record,) = records()
    assert record["fallback"] is None
    assert record["programs"]["dynamo"]["executor"] == "eager"
    assert "data-dependent" in record["programs"]["dynamo"]["reason"], record["programs"]


# ------------------------------------------------------------ optimizer, autocast


COMPILED_OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=0.1, weight_decay=0.01, amsgrad=True),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
}


@pytest.mark.parametrize("name", sorted(COMPILED_OPTIMIZERS))
def test_compiled_optimizer_step_is_one_program_equal_to_eager(name):
    # The step counters are CPU tensors: their arithmetic runs on the host per
    # call, and the foreach ops decompose per parameter into fused groups that
    # write the parameters and their state in place.
    # Gradients independent of the parameters: PyTorch's compiled path computes
    # the bias corrections in another order (rounding differences), which a
    # loss of the parameters would amplify from step to step.
    model, _ = pair(lambda: torch.nn.Sequential(torch.nn.Linear(40, 300), torch.nn.Linear(300, 7)))
    twin = copy.deepcopy(model)
    opts = [COMPILED_OPTIMIZERS[name](m.parameters()) for m in (model, twin)]
    step = torch.compile(opts[0].step, backend="neuron")
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p, q in zip(model.parameters(), twin.parameters()):
            p.grad = torch.randn(p.shape, generator=g).to("neuron")
            q.grad = p.grad.clone()
        step()
        opts[1].step()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu(), **TOL)
        for key, value in opts[1].state[q].items():
            torch.testing.assert_close(opts[0].state[p][key].cpu(), value.cpu(), **TOL)
    programs = [p for r in records() for p in r["programs"].values()]
    assert programs and all(p["executor"] == "compiler" and p["extern"] == 0 for p in programs), programs
    assert sum(r["nodes"]["inference"]["fused_groups"] for r in records() if "inference" in r["nodes"]) >= 4


def test_compiled_adamw_step_equals_eager():
    model, _ = pair(lambda: torch.nn.Linear(4, 3))
    twin = copy.deepcopy(model)
    opts = [torch.optim.AdamW(m.parameters(), lr=0.1) for m in (model, twin)]
    step = torch.compile(opts[0].step, backend="neuron")
    x = torch.randn(5, 4, device="neuron")
    for _ in range(2):
        for m, opt in zip((model, twin), opts):
            opt.zero_grad()
            m(x).square().sum().backward()
        step()
        opts[1].step()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.cpu(), q.cpu(), **TOL)
        s, r = opts[0].state[p], opts[1].state[q]
        assert s["step"].item() == r["step"].item() == 2
        torch.testing.assert_close(s["exp_avg"].cpu(), r["exp_avg"].cpu(), **TOL)
        torch.testing.assert_close(s["exp_avg_sq"].cpu(), r["exp_avg_sq"].cpu(), **TOL)
    assert records()


def test_autocast_inside_a_compiled_region():
    model, _ = pair(lambda: torch.nn.Linear(8, 4))

    def f(x):
        with torch.autocast("neuron", dtype=torch.bfloat16):
            return model(x).relu()

    x = torch.randn(3, 8, device="neuron")
    got = torch.compile(f, backend="neuron")(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.cpu(), f(x).cpu())


# ------------------------------------------------------------ registration


def test_default_backend_on_neuron_tensors_is_neuron():
    model, cpu = pair(Block)
    ids = torch.randint(0, 16, (2, 3))
    got = torch.compile(model)(ids.to("neuron"))  # Inductor alone: InductorError KeyError 'neuron'
    torch.testing.assert_close(got.cpu(), cpu(ids), **TOL)
    assert len(records()) == 1
    assert torch.compiler.get_default_backend().__name__ == "inductor_or_neuron"


def test_explicit_inductor_refuses_neuron_clearly():
    """Inductor named explicitly: a clear error naming backend="neuron" (not Inductor's KeyError), and the
    process keeps compiling."""
    model, _ = pair(lambda: torch.nn.Linear(4, 3))
    x = torch.randn(2, 4, device="neuron")
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r'backend="neuron"'):
        torch.compile(model, backend="inductor")(x)
    torch._dynamo.reset()
    assert torch.compile(model, backend="neuron")(x).shape == (2, 3)


def test_device_interface():
    from torch._dynamo.device_interface import get_interface_for_device

    interface = get_interface_for_device("neuron")
    assert get_interface_for_device("neuron:1") is interface
    assert interface.is_available() and interface.device_count() == torch.neuron.device_count()
    assert interface.current_device() == 0
    assert interface.get_raw_stream(0) == 0  # the default stream
    s = interface.Stream()
    with interface.stream(s):
        assert interface.current_stream() == s
        e = interface.Event()
        e.record()
    interface.synchronize()
    assert e.query()
    assert interface.get_device_properties(0).total_memory > 0
    assert interface.Worker.get_device_properties().name == torch.neuron.get_device_name()
    assert interface.is_dtype_supported(torch.bfloat16)
    x = torch.empty(1024, device="neuron")
    assert interface.memory_allocated() >= x.numel() * 4
    with interface.device(1 if torch.neuron.device_count() > 1 else 0):
        pass
    assert interface.current_device() == 0


ENTRY_POINT_CHILD = """
    import sys, torch
    assert "torchneuron" not in sys.modules and not hasattr(torch, "neuron")
    f = torch.compile(lambda x: x.relu() * 2, backend="neuron")  # loads the entry point
    x = torch.tensor([-1.0, 3.0], device="neuron")
    assert f(x).cpu().tolist() == [0.0, 6.0]
    import torchneuron
    print(len(torchneuron.compile_metrics()))
"""


def declared_entry_point():
    text = (ROOT / "setup.py").read_text()
    match = re.search(r'"torch_dynamo_backends":\s*\["(neuron\s*=\s*[\w.:]+)"\]', text)
    assert match, "setup.py declares no torch_dynamo_backends entry point 'neuron'"
    return match.group(1).replace(" ", "")


LIGHT_IMPORT_CHILD = """
    import sys, torch
    assert hasattr(torch, "neuron")
    print(sorted(m for m in ("torch._dynamo", "torch._inductor", "transformers") if m in sys.modules))
"""


# The device generator's first use is inside a program (no manual_seed, no eager
# random op before): it is created on the device's worker thread.
FIRST_RNG_IN_A_PROGRAM_CHILD = """
    import torch
    f = torch.compile(lambda x: torch.nn.functional.dropout(x, 0.5, training=True), backend="neuron")
    y = f(torch.ones(1000, device="neuron")).cpu()
    print(((y == 0) | (y == 2)).all().item(), 0.4 < (y == 0).float().mean().item() < 0.6)
"""


RUNTIME_ERROR_CHILD = """
    import torch
    emb = torch.nn.Embedding(4, 3).to("neuron")
    f = torch.compile(lambda i: emb(i) * 2, backend="neuron")
    with torch.no_grad():
        try:
            f(torch.tensor([1, 9], device="neuron"))
        except IndexError as e:
            print(" ".join(str(e).split()), e.__notes__)
        print(f(torch.tensor([1, 3], device="neuron")).shape)
"""


@pytest.fixture(scope="module", autouse=True)
def fresh_processes(start_python, tmp_path_factory):
    """The fresh-process checks below, started when the module starts, so that they run
    while the other tests do.

    "entry_point": autoload off (so nothing imports torchneuron), the backend found through
    the `torch_dynamo_backends` entry point alone. The metadata is the installed package's
    if it declares the entry point (`pip install -e .`); an older install's metadata would
    not, so then a distribution made from setup.py's declaration is put on the path:
    either way setup.py's line is what runs.
    "autoload": torchneuron loaded by `import torch`, the name found with or without the
    metadata. "light": what `import torch` imports. "runtime_error": an op failing inside a
    compiled graph, with NEURON_LAUNCH_BLOCKING=1 so that it fails at the op."""
    name, value = declared_entry_point().split("=")
    installed = importlib.metadata.entry_points(group="torch_dynamo_backends", name=name)
    entry_point_env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    if not any(ep.value == value for ep in installed):
        tmp = tmp_path_factory.mktemp("entry_points")
        dist = tmp / "torchneuron_entry_points-0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torchneuron-entry-points\nVersion: 0\n")
        (dist / "entry_points.txt").write_text(f"[torch_dynamo_backends]\n{name} = {value}\n")
        entry_point_env["PYTHONPATH"] = f"{tmp}:{ROOT / 'python'}"
    autoload = ENTRY_POINT_CHILD.replace('assert "torchneuron" not in sys.modules and not hasattr(torch, "neuron")',
                                         'assert hasattr(torch, "neuron")')
    return {"entry_point": start_python(ENTRY_POINT_CHILD, env=entry_point_env),
            "autoload": start_python(autoload),
            "light": start_python(LIGHT_IMPORT_CHILD),
            "runtime_error": start_python(RUNTIME_ERROR_CHILD, env={"NEURON_LAUNCH_BLOCKING": "1"}),
            "first_rng": start_python(FIRST_RNG_IN_A_PROGRAM_CHILD)}


def test_entry_point_works_without_import(fresh_processes):
    assert fresh_processes["entry_point"].wait(120).stdout.strip().splitlines()[-1] == "1"


def test_backend_name_works_under_autoload(fresh_processes):
    assert fresh_processes["autoload"].wait(120).stdout.strip().splitlines()[-1] == "1"


def test_the_device_generator_can_first_be_used_inside_a_program(fresh_processes):
    assert fresh_processes["first_rng"].wait(120).stdout.strip().splitlines()[-1] == "True True"


def test_import_torch_stays_light(fresh_processes):
    """Neither `import torch` nor torchneuron's autoload may import Dynamo or Inductor (seconds):
    their hooks wait for the first torch.compile."""
    assert fresh_processes["light"].wait(120).stdout.strip().splitlines()[-1] == "[]"


# ------------------------------------------------------------ errors, options


def test_an_error_inside_a_graph_names_the_graph_and_node(fresh_processes):
    notes, shape = fresh_processes["runtime_error"].wait(120).stdout.strip().splitlines()[-2:]
    # The error keeps eager's type; the program's step names the op, the note the graph.
    assert re.search(r"in compiled program step \d+ \(extern call aten::embedding.default\)", notes), notes
    assert re.search(r"in compiled graph \d+ \(inference\)", notes), notes
    assert shape == "torch.Size([2, 3])"  # the process keeps working


def test_cpu_tensor_into_a_compiled_neuron_module():
    model, _ = pair(lambda: torch.nn.Linear(4, 2))
    compiled = torch.compile(model, backend="neuron")
    compiled(torch.randn(3, 4, device="neuron"))
    with pytest.raises(RuntimeError, match=r"cpu and neuron:0"):
        compiled(torch.randn(3, 4))
    assert compiled(torch.randn(3, 4, device="neuron")).shape == (3, 2)  # the process keeps working


def test_a_graph_without_neuron_tensors_names_its_input():
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match=r"graph \d+: input L\['x'\] is a cpu tensor"):
        torch.compile(lambda x: x * 2, backend="neuron")(torch.ones(3))
    assert records()[-1]["fallback"] is None


def test_fallback_eager_runs_the_graph_with_one_warning(monkeypatch):
    monkeypatch.setenv("TORCHNEURON_COMPILE_FALLBACK", "eager")
    f = torch.compile(lambda x: x * 3, backend="neuron")
    with pytest.warns(UserWarning, match=r"fallback='eager'") as caught:
        assert f(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
        assert f(torch.ones(3)).tolist() == [3.0, 3.0, 3.0]
    assert sum("fallback='eager'" in str(w.message) for w in caught) == 1
    assert "input L['x']" in records()[-1]["fallback"]


def test_fallback_eager_covers_a_backward_that_fails_to_compile(monkeypatch):
    """A training graph's backward is compiled with its forward (for AOTAutograd's
    cache), so a backward the executor cannot build falls back with the forward:
    the graph runs eagerly, gradients equal CPU's; with fallback='raise' the error
    names the backward."""
    from torchneuron.compile import executor

    build = executor.build

    def no_backward(gm, example_inputs, info, record=None):
        if info.kind == "backward":
            raise RuntimeError("this backward cannot be built")
        return build(gm, example_inputs, info, record)

    monkeypatch.setattr(executor, "build", no_backward)
    model, cpu = pair(lambda: torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed,
                       match=r"\(backward\): the executor failed: .*cannot be built"):
        torch.compile(model, backend="neuron")(x.to("neuron"))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="neuron", options={"fallback": "eager"})
    with pytest.warns(UserWarning, match=r"\(backward\): the executor failed"):
        compiled(x.to("neuron")).sum().backward()
    cpu(x).sum().backward()
    torch.testing.assert_close(model.weight.grad.cpu(), cpu.weight.grad, **TOL)
    assert "(backward)" in records()[-1]["fallback"]


def test_options_are_validated():
    x = torch.ones(2, device="neuron")
    with pytest.raises(Exception, match=r"unknown option\(s\) \['bogus'\]; valid options .*'debug_dir', 'fallback'"):
        torch.compile(lambda x: x + 1, backend="neuron", options={"bogus": 1})(x)
    with pytest.raises(Exception, match=r"'fallback'='maybe'"):
        torch.compile(lambda x: x + 2, backend="neuron", options={"fallback": "maybe"})(x)
    with pytest.raises(Exception, match=r"unknown mode 'fastest'"):
        torch.compile(lambda x: x + 3, backend="neuron", mode="fastest")(x)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune"])
def test_modes_are_accepted(mode):
    got = torch.compile(lambda x: x * 2 + 1, backend="neuron", mode=mode)(torch.ones(2, device="neuron"))
    assert got.cpu().tolist() == [3.0, 3.0]
    assert records()[-1]["mode"] == mode


def test_compile_metrics_record(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHNEURON_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached yet
    model, _ = pair(Block)
    compiled = torch.compile(model, backend="neuron", options={"debug_dir": str(tmp_path)})
    compiled(torch.randint(0, 16, (2, 3), device="neuron")).sum().backward()
    (record,) = records()
    assert record["graph_id"] >= 0 and record["compile_id"] == "0/0"
    # The fixture forgot this process's programs, and the disk cache is empty.
    assert record["cache"] == "miss" and record["executor"] == "compiler" and record["fallback"] is None
    for kind in ("forward", "backward"):
        counts = record["nodes"][kind]
        assert set(counts) == {"native_kernels", "fused_groups", "extern"} and counts["extern"] > 0
    assert record["dynamo_nodes"] > 0
    times = record["times_ms"]
    assert {"dynamo", "checks", "aot", "executor_forward", "executor_backward"} <= set(times)
    assert all(t is not None and t >= 0 for t in times.values())
    folder = tmp_path / f"graph_{record['graph_id']:04d}"
    assert sorted(p.name for p in folder.iterdir()) == [
        "aot_backward.py", "aot_forward.py", "dynamo.py", "graph_backward.neurongraph", "graph_forward.neurongraph",
        "ir_backward_fusion.txt", "ir_backward_patterns.txt", "ir_forward_fusion.txt", "ir_forward_patterns.txt",
        "program_backward.txt", "program_forward.txt", "record.json"]
    # The IR after each pass: the forward's layer norm is the device's row-norm kernel.
    assert "node neuron::row_norm" in (folder / "ir_forward_patterns.txt").read_text()
    assert "fused group" in (folder / "ir_forward_fusion.txt").read_text()
    forward = (folder / "aot_forward.py").read_text()
    for kept in ("aten.embedding", "aten.addmm", "aten.native_layer_norm", "aten._softmax", "aten.gelu"):
        assert kept in forward, f"{kept} should stay whole in the AOT graph"


# ------------------------------------------------------------ Hugging Face

COMMON = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, max_position_embeddings=128, bos_token_id=1, eos_token_id=2,
              pad_token_id=0)


def hf_config(arch):
    transformers = pytest.importorskip("transformers", reason="the Hugging Face packages of requirements.txt "
                                                              "are not installed")
    if arch == "llama":
        return transformers.LlamaConfig(**COMMON)
    if arch == "mistral":
        return transformers.MistralConfig(**COMMON, sliding_window=8)
    config = transformers.Gemma2Config(**COMMON, sliding_window=8, query_pre_attn_scalar=8)
    config._attn_implementation = "eager"  # Transformers has no sdpa path for Gemma2
    return config


@pytest.mark.parametrize("arch", ["llama", "mistral", "gemma2"])
def test_hf_generate_static_cache_auto_compiles(arch):
    """Transformers compiles the decode step by itself on a neuron model with a static
    cache (CompileConfig(backend="neuron")). Tokens equal eager decoding, and after the
    first generate() nothing compiles again; sliding-window layers (mistral, gemma2)
    meet two regimes in the first call (filling, full: the prompt plus 12 tokens
    overflows the window of 8), each compiled once."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config(arch)).eval().to("neuron")
    kwargs = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, cache_implementation="static")
    prompts = [torch.randint(3, 128, (2, 5), device="neuron") for _ in range(2)]
    mask = torch.ones(2, 5, dtype=torch.long, device="neuron")
    mask[1, :2] = 0  # the second row is left-padded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, ids in enumerate(prompts):
            eager = model.generate(ids, attention_mask=mask, disable_compile=True, **kwargs)
            compiled = model.generate(ids, attention_mask=mask, **kwargs)
            assert torch.equal(compiled.cpu(), eager.cpu())
            if i == 0:
                first = len(records())
    assert first == (1 if arch == "llama" else 2), [r["recompile_reason"] for r in records()]
    assert len(records()) == first, [r["recompile_reason"] for r in records()[first:]]
    # Every decode step runs as one compiled program with the device's kernels (attention,
    # RMSNorm, rotary embedding); sliding-window steps take the cache's fill level as an
    # int input, computed on the host per call.
    for p in (p for r in records() for p in r["programs"].values()):
        assert p["executor"] == "compiler" and p["native_kernels"] > 0 and p["fused_groups"] > 0, p


def test_hf_llama_training_step_equals_eager(tmp_path):
    """A training step of a tiny Llama: loss and every gradient equal eager neuron. The AOT
    forward keeps the device's fused attention, embedding, SiLU and the loss whole; the
    backward runs the rotary embedding's gradient as one kernel."""
    from transformers import AutoModelForCausalLM

    config = hf_config("llama")
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to("neuron")
    twin = copy.deepcopy(model)
    ids = torch.randint(3, 128, (2, 9), device="neuron")
    compiled = torch.compile(model, backend="neuron", options={"debug_dir": str(tmp_path)})
    loss = compiled(input_ids=ids, labels=ids).loss
    loss.backward()
    ref = twin(input_ids=ids, labels=ids).loss
    ref.backward()
    torch.testing.assert_close(loss.cpu(), ref.cpu(), **TOL)
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **TOL, msg=name)
    (record,) = records()
    forward = (tmp_path / f"graph_{record['graph_id']:04d}" / "aot_forward.py").read_text()
    for kept in ("_scaled_dot_product_fused_attention_overrideable", "aten.embedding", "aten.silu",
                 "aten.nll_loss_forward"):
        assert kept in forward, f"{kept} should stay whole in the AOT graph"
    # The rotary embedding's gradient (autograd's products, negation and slice_scatters into
    # zeros) runs as the device's kernel, equal to the decomposed gradient above.
    backward = (tmp_path / f"graph_{record['graph_id']:04d}" / "program_backward.txt").read_text()
    assert backward.count("native neuron::rope_backward") == 2, backward
    assert "slice_scatter" not in backward, backward


def test_hf_get_compiled_call_passes_an_uncompiled_call_through():
    """Transformers' get_compiled_call returns the plain forward for llama4 models on
    every device (transformers 5.23); the sliding-window adaptation (7) must hand that
    call back as it is, not wrap it as a compiled one."""
    transformers = pytest.importorskip("transformers")
    config = transformers.Llama4TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                           intermediate_size_mlp=64, num_hidden_layers=2, num_attention_heads=4,
                                           num_key_value_heads=2, head_dim=8)
    model = transformers.Llama4ForCausalLM(config).to("neuron")
    assert model.get_compiled_call(None) == model.__call__


def test_hf_architectures_compile_as_frames_of_their_own():
    """Dynamo counts recompilations per code object, up to 8. Each architecture's compiled
    forward is a frame of its own (its outermost frame is torchneuron's error-naming
    wrapper, one code object per class), not a recompilation of another model's frame."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    configs = [hf_config("llama"), Qwen3Config(**COMMON)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for config in configs:
            model = AutoModelForCausalLM.from_config(config).eval().to("neuron")
            model.generate(torch.randint(3, 128, (1, 4), device="neuron"), max_new_tokens=3, do_sample=False,
                           cache_implementation="static")
    frames = [r["compile_id"].split("/") for r in records()]
    assert frames == [["0", "0"], ["1", "0"]], [r["recompile_reason"] for r in records()]


def test_hf_trainer_torch_compile_trains_on_neuron(tmp_path):
    """TrainingArguments(torch_compile=True) with a neuron model: the Trainer trains on
    neuron:0 with backend "neuron" (Transformers' device detection is adapted to the
    device, hf_integration adaptation 8), and its losses equal an eager Trainer's."""
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    config = hf_config("llama")
    config.num_hidden_layers = 1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to("neuron")
    twin = copy.deepcopy(model)
    data = [{"input_ids": torch.randint(3, 128, (8,)), "labels": torch.randint(3, 128, (8,))} for _ in range(4)]
    losses = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m, compile_ in ((model, True), (twin, False)):
            args = TrainingArguments(output_dir=str(tmp_path / str(compile_)), torch_compile=compile_,
                                     per_device_train_batch_size=2, max_steps=2, report_to=[], save_strategy="no",
                                     logging_steps=1, dataloader_pin_memory=False)
            if compile_:
                assert args.device == torch.device("neuron:0") and args.torch_compile_backend == "neuron"
            trainer = Trainer(model=m, args=args, train_dataset=data)
            trainer.train()
            losses.append([e["loss"] for e in trainer.state.log_history if "loss" in e])
    assert len(records()) == 1
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)
