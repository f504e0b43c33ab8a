"""Random numbers on neuron: one generator per core, seeded by
torch.manual_seed, independent of the CPU generator."""
import pytest
import torch
import torch.nn.functional as F

D = "neuron"

# Each draws from the neuron generator; small shapes.
DRAWS = {
    "rand": lambda g=None: torch.rand(7, device=D, generator=g),
    "randn": lambda g=None: torch.randn(3, 5, device=D, generator=g),
    "randint": lambda g=None: torch.randint(0, 1000, (9,), device=D, generator=g),
    "normal_": lambda g=None: torch.empty(8, device=D).normal_(2.0, 3.0, generator=g),
    "uniform_": lambda g=None: torch.empty(8, device=D).uniform_(-1, 1, generator=g),
    "bernoulli": lambda g=None: torch.bernoulli(torch.full((16,), 0.3, device=D), generator=g),
    "randperm": lambda g=None: torch.randperm(12, device=D, generator=g),
    "multinomial": lambda g=None: torch.multinomial(torch.arange(1.0, 11.0, device=D), 5,
                                                    generator=g),
    "normal": lambda g=None: torch.normal(torch.zeros(6, device=D), torch.ones(6, device=D),
                                          generator=g),
    "exponential_": lambda g=None: torch.empty(6, device=D).exponential_(generator=g),
}


def _draw_all(g=None):
    return {name: f(g).cpu() for name, f in DRAWS.items()}


def _dropout():
    return F.dropout(torch.ones(32, device=D), p=0.5, training=True).cpu()


def _assert_same(a, b):
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_manual_seed_reproduces(name):
    torch.manual_seed(1234)
    first = DRAWS[name]().cpu()
    second_draw = DRAWS[name]().cpu()
    torch.manual_seed(1234)
    assert torch.equal(DRAWS[name]().cpu(), first)
    assert torch.equal(DRAWS[name]().cpu(), second_draw)
    assert first.device.type == "cpu"


def test_different_seeds_differ():
    torch.manual_seed(1)
    a = torch.rand(64, device=D).cpu()
    torch.manual_seed(2)
    b = torch.rand(64, device=D).cpu()
    assert not torch.equal(a, b)


def test_dropout_reproduces():
    torch.manual_seed(7)
    a = _dropout()
    torch.manual_seed(7)
    b = _dropout()
    assert torch.equal(a, b)
    assert set(a.unique().tolist()) <= {0.0, 2.0}
    assert 0 < (a == 0).sum() < 32


def test_dropout_module_and_eval():
    m = torch.nn.Dropout(0.25).to(D)
    x = torch.ones(4, 8, device=D)
    m.eval()
    assert torch.equal(m(x).cpu(), torch.ones(4, 8))
    m.train()
    torch.manual_seed(3)
    y1 = m(x).cpu()
    torch.manual_seed(3)
    assert torch.equal(m(x).cpu(), y1)


def test_independent_of_cpu_generator():
    torch.manual_seed(99)
    expected = _draw_all()
    torch.manual_seed(99)
    torch.rand(1000)  # consume CPU random numbers
    torch.randn(17)
    torch.randperm(50)
    got = _draw_all()
    _assert_same(got, expected)


def test_cpu_sequence_independent_of_neuron_draws():
    torch.manual_seed(5)
    expected = torch.rand(10)
    torch.manual_seed(5)
    _draw_all()
    assert torch.equal(torch.rand(10), expected)


def test_neuron_manual_seed_only_touches_neuron():
    torch.manual_seed(11)
    cpu_expected = torch.rand(5)
    torch.manual_seed(11)
    torch.neuron.manual_seed(12)
    assert torch.equal(torch.rand(5), cpu_expected)
    n1 = torch.rand(5, device=D).cpu()
    torch.neuron.manual_seed(12)
    assert torch.equal(torch.rand(5, device=D).cpu(), n1)
    assert torch.neuron.initial_seed() == 12


def test_each_core_has_its_generator(two_cores):
    torch.manual_seed(21)  # seeds every core
    a0 = torch.rand(6, device="neuron:0").cpu()
    a1 = torch.rand(6, device="neuron:1").cpu()
    torch.manual_seed(21)
    torch.rand(100, device="neuron:0")  # consuming core 0 does not move core 1
    assert torch.equal(torch.rand(6, device="neuron:1").cpu(), a1)
    torch.neuron.manual_seed_all(21)
    assert torch.equal(torch.rand(6, device="neuron:0").cpu(), a0)
    assert len(torch.neuron.default_generators) == torch.neuron.device_count()
    assert torch.neuron.default_generators[1].device == torch.device("neuron:1")


def test_rng_state_round_trip():
    torch.manual_seed(0)
    torch.rand(3, device=D)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    expected = _draw_all()
    torch.rand(50, device=D)  # move on
    torch.neuron.set_rng_state(state)
    _assert_same(_draw_all(), expected)
    # get_rng_state_all / set_rng_state_all
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    x = torch.rand(4, device=D).cpu()
    torch.neuron.set_rng_state_all(states)
    assert torch.equal(torch.rand(4, device=D).cpu(), x)


def test_rng_state_is_a_copy():
    state = torch.neuron.get_rng_state()
    saved = state.clone()
    x = torch.rand(4, device=D).cpu()  # advances the generator
    assert torch.equal(state, saved)  # the returned state does not follow it
    torch.neuron.set_rng_state(state)
    state.zero_()  # nor does the generator follow the tensor it was set from
    assert torch.equal(torch.rand(4, device=D).cpu(), x)


def test_invalid_rng_state_is_rejected():
    with pytest.raises(RuntimeError, match="size"):
        torch.neuron.set_rng_state(torch.zeros(10, dtype=torch.uint8))
    assert torch.rand(2, device=D).device.type == "neuron"


def test_fork_rng():
    torch.manual_seed(4)
    devices = range(torch.neuron.device_count())
    with torch.random.fork_rng(devices=devices, device_type="neuron"):
        inside = torch.rand(5, device=D).cpu()
    after = torch.rand(5, device=D).cpu()
    assert torch.equal(inside, after)  # the state was restored on exit


def test_activation_checkpointing_recomputes_the_forward_dropout_masks():
    """torch.utils.checkpoint(preserve_rng_state=True) saves the device's generator
    state only if torch.neuron._initialized is true (as torch.cuda's): the
    recomputation then draws the forward's masks, and the gradient equals the
    uncheckpointed one's."""
    torch.manual_seed(0)
    w = torch.randn(64, 64, device=D)
    x = torch.randn(8, 64, device=D)

    def block(t):
        return F.dropout(t @ w, p=0.5, training=True).tanh() @ w

    grads = []
    for checkpointed in (False, True):
        xr = x.clone().requires_grad_()
        torch.manual_seed(5)
        y = torch.utils.checkpoint.checkpoint(block, xr, use_reentrant=False) if checkpointed else block(xr)
        y.square().sum().backward()
        grads.append(xr.grad.cpu())
    assert torch.neuron._initialized
    assert torch.equal(grads[0], grads[1])


def test_explicit_generator():
    g = torch.Generator(device=D)
    assert g.device == torch.device("neuron:0")
    g.manual_seed(42)
    a = _draw_all(g)
    g.manual_seed(42)
    _assert_same(_draw_all(g), a)
    # it does not touch the default generator
    torch.manual_seed(8)
    d1 = torch.rand(5, device=D).cpu()
    torch.manual_seed(8)
    g.manual_seed(1)
    torch.rand(100, device=D, generator=g)
    assert torch.equal(torch.rand(5, device=D).cpu(), d1)
    # state round trip and clone
    s = g.get_state()
    x = torch.rand(5, device=D, generator=g).cpu()
    g.set_state(s)
    assert torch.equal(torch.rand(5, device=D, generator=g).cpu(), x)
    assert torch.Generator(device="neuron:1").device == torch.device("neuron:1")


def test_generator_seeded_like_default_matches():
    torch.manual_seed(77)
    d = _draw_all()
    g = torch.Generator(device=D).manual_seed(77)
    _assert_same(_draw_all(g), d)


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_cpu_generator_for_neuron_op_is_a_clear_error(name):
    g = torch.Generator()  # a CPU generator
    with pytest.raises(RuntimeError, match=r"\[neuron\] aten::\w+.*: expected a generator on "
                                           r"neuron for a neuron tensor, got one on cpu"):
        DRAWS[name](g)


@pytest.mark.parametrize("name", ["rand", "normal_", "randperm"])
def test_generator_of_another_core_is_a_clear_error(two_cores, name):
    g = torch.Generator(device="neuron:1")
    with pytest.raises(RuntimeError, match=r"^\[neuron\] aten::\w+.*: the generator is on "
                                           r"neuron:1 but the tensor is on neuron:0"):
        DRAWS[name](g)  # tensors on neuron:0


def test_generator_offset_is_a_clear_error():
    g = torch.Generator(device=D)
    with pytest.raises(RuntimeError, match="no offset"):
        g.get_offset()
    with pytest.raises(RuntimeError, match="no offset"):
        g.set_offset(4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_distribution_sanity(dtype):
    torch.manual_seed(2024)
    n = 200_000
    u = torch.rand(n, device=D, dtype=dtype).float().cpu()
    assert 0.0 <= u.min() and u.max() < 1.0 + (1e-2 if dtype == torch.bfloat16 else 0)
    assert abs(u.mean().item() - 0.5) < 0.01
    assert abs(u.std().item() - (1 / 12) ** 0.5) < 0.01
    z = torch.randn(n, device=D, dtype=dtype).float().cpu()
    assert abs(z.mean().item()) < 0.01
    assert abs(z.std().item() - 1.0) < 0.01
    nz = torch.empty(n, device=D, dtype=dtype).normal_(3.0, 2.0).float().cpu()
    assert abs(nz.mean().item() - 3.0) < 0.03
    assert abs(nz.std().item() - 2.0) < 0.03


def test_discrete_distribution_sanity():
    torch.manual_seed(5)
    n = 100_000
    b = torch.bernoulli(torch.full((n,), 0.3, device=D)).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - 0.3) < 0.01
    r = torch.randint(0, 10, (n,), device=D).cpu()
    counts = torch.bincount(r, minlength=10).float() / n
    assert r.min() == 0 and r.max() == 9
    assert (counts - 0.1).abs().max() < 0.01
    p = torch.randperm(1000, device=D).cpu()
    assert torch.equal(p.sort().values, torch.arange(1000))
    m = torch.multinomial(torch.tensor([0.0, 1.0, 3.0], device=D), n, replacement=True).cpu()
    freq = torch.bincount(m, minlength=3).float() / n
    assert freq[0] == 0
    assert abs(freq[2].item() - 0.75) < 0.01
