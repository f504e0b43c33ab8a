"""Shared fixtures of the Python suite.

`import torch` alone must make the `neuron` device available (autoload), so
nothing here imports torchneuron before torch does.
"""
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
# Compiled programs, and AOTAutograd's entries of compiled graphs (kept in
# PyTorch's cache directory), go to caches of this process only: a user's
# cache (or an earlier run's, or another pytest-xdist worker's) would turn the
# tests' compilations into cache hits. A directory the user set is kept.
if "TORCHNEURON_CACHE_DIR" not in os.environ or os.environ.get("TORCHNEURON_TEST_OWN_CACHE"):
    import tempfile

    _own_cache = tempfile.mkdtemp(prefix="torchneuron-test-cache-")
    os.environ["TORCHNEURON_CACHE_DIR"] = os.path.join(_own_cache, "programs")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_own_cache, "torch")
    os.environ["TORCHNEURON_TEST_OWN_CACHE"] = "1"

import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import summaries  # noqa: E402

DEVICE = "neuron"
# Files whose tests pytest-xdist may spread over its workers one by one (each
# test stands alone); every other file's tests stay together in one worker
# (`--dist loadgroup`), since they share module fixtures and some check
# process-wide state before and after.
SPREAD_FILES = {"test_opinfo.py", "test_module_db.py"}


def pytest_configure(config):
    config.pluginmanager.register(summaries.Plugin(), "conformance-summaries")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name not in SPREAD_FILES:
            item.add_marker(pytest.mark.xdist_group(item.path.name))

# Variables that change the device's configuration: cleared for child
# processes so that each one sees exactly the configuration its test sets.
CONFIG_VARS = (
    "NEURON_RT_NUM_CORES",
    "NEURON_RT_VISIBLE_CORES",
    "TORCHNEURON_DEVICE_MEMORY",
    "TORCHNEURON_KERNEL_THREADS",
    "TORCHNEURON_ISA",
    "NEURON_LAUNCH_BLOCKING",
    "TORCHNEURON_CPU_FALLBACK_OPS",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
)


def device_problem():
    """None if `neuron` works in this process, else why not."""
    if not hasattr(torch, "neuron"):
        return "import torch did not register the 'neuron' device"
    if not torch.neuron.is_available():
        return "torch.neuron.is_available() is False"
    try:
        x = torch.arange(6, dtype=torch.float32).view(2, 3)
        got = (x.to(DEVICE) * 2 + 1).sum(0).cpu()
        torch.neuron.synchronize()
    except Exception as e:  # pragma: no cover - only when broken
        return f"a small computation on neuron raised {type(e).__name__}: {e}"
    if not torch.equal(got, (x * 2 + 1).sum(0)):
        return f"a small computation on neuron gave {got}, expected {(x * 2 + 1).sum(0)}"
    return None


def _start_clean():
    """Drops what an earlier test outside these files (the OpInfo suite) may
    have left: a pending async error, another current device or stream. The
    tests of the other files are checked for leftovers when they end."""
    if not hasattr(torch, "neuron"):
        return
    for i in range(torch.neuron.device_count()):
        try:
            torch.neuron.synchronize(i)
        except Exception as e:
            warnings.warn(f"drained an error an earlier test left on neuron:{i}: {e}")
        torch.neuron.set_stream(torch.neuron.default_stream(i))
    if torch.neuron.device_count():
        torch.neuron.set_device(0)


@pytest.fixture(autouse=True)
def neuron(request):
    """The device, checked usable before each test; after it, the process must
    still compute correctly on every core, with no error left in any queue and
    the current device and streams back to their defaults."""
    if request.node.path.name.startswith("test_opinfo"):
        yield torch.device(DEVICE)  # that file checks its own way
        return
    _start_clean()
    problem = device_problem()
    assert problem is None, problem
    yield torch.device(DEVICE)
    problems = []
    for i in range(torch.neuron.device_count()):
        try:
            torch.neuron.synchronize(i)
        except Exception as e:
            problems.append(f"an error was left in neuron:{i}'s queue: {type(e).__name__}: {e}")
        x = torch.arange(4.0)
        got = (x.to(f"{DEVICE}:{i}") + 1).cpu()
        if not torch.equal(got, x + 1):
            problems.append(f"neuron:{i} computes wrongly after the test: {got}")
        if torch.neuron.current_stream(i) != torch.neuron.default_stream(i):
            problems.append(f"the test left a non-default current stream on neuron:{i}")
            torch.neuron.set_stream(torch.neuron.default_stream(i))
    if torch.neuron.current_device() != 0:
        problems.append(f"the test left neuron:{torch.neuron.current_device()} current")
        torch.neuron.set_device(0)
    assert not problems, "; ".join(problems)


@pytest.fixture
def two_cores(neuron):
    if torch.neuron.device_count() < 2:
        pytest.skip("needs 2 neuron cores (the default configuration has 2)")
    return neuron


def child_env(**overrides):
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    env["HF_HUB_OFFLINE"] = "1"
    env.update({k: str(v) for k, v in overrides.items()})
    return env


class Child:
    """A Python snippet running in a fresh interpreter (started at once)."""

    def __init__(self, code, env=None):
        self.code = textwrap.dedent(code)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.code],
            env=child_env(**(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.done = None

    def wait(self, timeout=60, ok=True):
        """The CompletedProcess; with ok=True the child must have exited with 0."""
        if self.done is None:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
                pytest.fail(f"child did not finish within {timeout}s\n--- stdout\n{out}"
                            f"\n--- stderr\n{err}")
            self.done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode,
                                                    out, err)
        if ok:
            assert self.done.returncode == 0, (
                f"child exited with {self.done.returncode}\n--- stdout\n{self.done.stdout}"
                f"\n--- stderr\n{self.done.stderr}")
        return self.done

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture(scope="module")
def start_python():
    """start_python(code, env) starts a child interpreter and returns a Child;
    children still running when the module ends are killed. Starting several
    before waiting on any runs them in parallel."""
    children = []

    def start(code, env=None):
        children.append(Child(code, env))
        return children[-1]

    yield start
    for c in children:
        c.kill()


@pytest.fixture
def run_python(start_python):
    """run_python(code, env, timeout, ok) runs a child to its end."""

    def run(code, env=None, timeout=60, ok=True):
        return start_python(code, env).wait(timeout, ok)

    return run


_MODULE_FUNCTION = """
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location("cases", {path!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(json.dumps(module.{function}()))
"""


@pytest.fixture(scope="module")
def in_fresh_process(request, start_python):
    """in_fresh_process(name) runs the test module's function `name` in a fresh
    interpreter and returns its (JSON) result; run once per module and name.

    The backend runs the first call of each argument signature synchronously
    and queues the later ones, and after enough signatures of an op it trusts
    new ones without that first run. What a first call does therefore depends
    on everything the process ran before; a fresh interpreter has seen
    nothing. start(name) starts it early, so that several run in parallel."""
    children, results = {}, {}

    def start(name, env=None):
        if name not in children:
            code = _MODULE_FUNCTION.format(path=str(request.module.__file__), function=name)
            children[name] = start_python(code, env)
        return children[name]

    def run(name, env=None, timeout=120):
        if name not in results:
            done = start(name, env).wait(timeout)
            results[name] = json.loads(done.stdout.splitlines()[-1])
        return results[name]

    run.start = start
    return run


@pytest.fixture
def fresh_dynamo(tmp_path_factory, monkeypatch):
    """For compile tests (`pytestmark = pytest.mark.usefixtures("fresh_dynamo")`):
    each test starts without Dynamo's caches of earlier tests (their guards would
    count as recompilations), with no compile records, no programs in memory and
    an empty AOTAutograd cache (an earlier test's graph would be a hit, skipping
    the compilation a test looks at)."""
    import torch._dynamo

    import torchneuron
    from torchneuron.compile.executor import clear_programs

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("torch-cache")))
    torch._dynamo.reset()
    torchneuron.reset_compile_metrics()
    clear_programs()
    yield
    torch._dynamo.reset()
