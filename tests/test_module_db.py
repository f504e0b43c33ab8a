"""Module conformance: PyTorch's module database run on `neuron` and compared with CPU.

Every ModuleInfo in `torch.testing._internal.common_modules.module_db` is run
sample by sample (its `module_inputs_func`) on `neuron` and on CPU, as
PyTorch's own TestModule.test_cpu_gpu_parity does for CUDA, and the results
are compared with `torch.testing.assert_close` at its default tolerances for
the dtype (NaNs compare equal). Tolerances are never loosened. One pytest test
per ModuleInfo, dtype, mode and direction:

  test_forward[<module>-<dtype>-<mode>]   the module's outputs under
        torch.no_grad(), the output of the sample's reference_fn where it has
        one (what PyTorch's test_forward compares with; the transformer
        samples' reference_fn runs the fused inference fast path), the
        module's parameters and buffers afterwards (running statistics) and
        the sample's tensor arguments afterwards (catches stray writes). A
        reference_fn that mixes in CPU tensors it captured when the sample was
        made (loss weights) cannot run on neuron; that comparison is dropped.
  test_backward[<module>-<dtype>-<mode>]  with autograd: the outputs that
        require grad, and for a fixed random grad_output the gradients of the
        sample's input tensors and of the module's parameters

dtype: float32 and bfloat16, both for every ModuleInfo. PyTorch's parity
test runs only the dtypes a ModuleInfo lists (`dtypes`): most list float32 and
float64 only, bfloat16 only GroupNorm and LinearCrossEntropyLoss. Here every
module also runs in bfloat16, its samples made by its module_inputs_func with
dtype=bfloat16, as for a listed dtype: every module_inputs_func takes it
cleanly (the sample list of float32, same count and structure, its values
drawn in bfloat16; floating tensors and dtype arguments in bfloat16; a
float64 tensor a sample pins, FractionalMaxPool's _random_samples, stays
float64 as in float32).
The other way, making the float32 samples and converting the module and the
floating inputs to bfloat16, gives invalid samples: what a sample captured in
float32 stays float32 (12 of CrossEntropyLoss's 105 samples then raise
"expected scalar type BFloat16 but found Float" on CPU, in their
reference_fn), and dtype arguments (LinearCrossEntropyLoss's dtype=) stay
float32. The CPU run in bfloat16 is the reference, and the float64 evaluation
judges rounding as for float32 (below; the ulp is bfloat16's). Where CPU has no bfloat16 kernel for
a module (ATen's "... not implemented for 'BFloat16'", e.g. avg_pool3d,
ctc_loss, multi_margin_loss) the sample is excluded with that reason; neuron,
which runs CPU's kernels, must then raise too. mode: `train` and `eval` where
the ModuleInfo says the modes differ (`train_and_eval_differ`), else `train`
only, as PyTorch's @modules decorator does. The ModuleInfo's decorators and
skips for TestModule.test_cpu_gpu_parity on this device and dtype apply: a
unittest skip or expected failure skips the test with its reason; tolerance
overrides are ignored (mismatches are judged against float64 instead, below).

How a sample is run: the samples are generated on CPU (seeded, so a sample
index always names the same input). The module is built on CPU from the
sample's constructor arguments (seeded), converted to the dtype and, if lazy,
initialized by a forward; its parameters and buffers are the sample's state.
Each run then builds the module afresh on its device (`.to(dtype).to(device)`,
lazy modules initialized there by a forward under no_grad), copies the state
in, and calls it on a copy of the sample's inputs with their exact layout
(`conformance.Copier`; a PackedSequence keeps its batch_sizes on CPU). The
module runs twice on neuron: the backend runs the first call of each argument
signature synchronously and queues the later ones, and both must agree with
CPU. Every tensor result of the neuron run must be on `neuron`.

Sampling: the test command runs a sampled form, at most
TORCHNEURON_MODULE_DB_SAMPLES (default 12) samples per test, spread evenly
over the ModuleInfo's samples (first and last included), the same cap for
both dtypes: the sampled form takes about 110 s on a 2-core machine (float32
about 50 s, bfloat16 about 50 s), within the suite's budget of 2.5 minutes,
so bfloat16 needs no smaller cap. TORCHNEURON_MODULE_DB_SAMPLES=0
runs every sample (the full form, see tests/README.md). Sample indices are
those of the full list either way.

Excluded samples (reported, never counted as passes): samples without a
forward input; samples whose CPU result changes between two runs with
different seeds (random modules such as FractionalMaxPool in training);
samples the CPU reference itself rejects, among them those CPU has no
kernel for in the dtype (neuron must then reject them too, or the sample
fails); backward samples without a differentiable output.

Rounding: a mismatch beyond the default tolerance is judged against the
sample evaluated on CPU in float64 (module and inputs converted exactly): it
passes, counted as a rounding pass, when neuron is no further from that
result than twice CPU's distance plus one ulp of the largest value
(`conformance.rounding_verdict`, shared with test_opinfo.py).

Known failures live in tests/module_db_known_failures.json: one entry per
(module, dtype, mode, direction) with the failing sample indices (or "all")
and a reason; a listed sample that fails is expected (xfail), a failure that
is not listed fails the test, and a listed sample that passes fails the test
too (strict) unless the entry says "strict": false (its reason says why).

The pytest run ends with one summary line per category, e.g.
"module_db float32 train backward: N/M samples pass (P%)".
TORCHNEURON_MODULE_DB_RECORD=<file.json> writes every failing sample (listed
or not) with its error to that file, which helps when updating the list.
"""
import json
import os
import pathlib
import time
import warnings

import pytest
import torch
import torchneuron
from torch.nn.utils.rnn import PackedSequence
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_map

import summaries
from conformance import (DEVICE, Copier, Excluded, Verdict, check_on_neuron, compare, drain,
                         rounding_verdict, short, sync, tensors, to_cpu, to_float64)

SAMPLES = int(os.environ.get("TORCHNEURON_MODULE_DB_SAMPLES", "12"))
TIMEOUT_S = 900  # per test; the full LinearCrossEntropyLoss list (857 samples) is the longest
KNOWN_FAILURES_FILE = pathlib.Path(__file__).with_name("module_db_known_failures.json")
DTYPES = ("float32", "bfloat16")
DIRECTIONS = ("forward", "backward")
# The test of PyTorch's whose decorators and skips apply here.
PARITY_TEST = ("TestModule", "test_cpu_gpu_parity")

# What a sample's reference_fn gives on neuron when it mixes in CPU tensors it
# captured; that comparison is dropped (see _Case.forward).
CAPTURED_CPU = "the reference_fn uses CPU tensors it captured"

MODULES = {mi.name: mi for mi in module_db}
assert len(MODULES) == len(module_db), "ModuleInfo names are not unique"


def _modes(mi):
    # As PyTorch's @modules: eval mode only where the ModuleInfo says it differs.
    return ("train", "eval") if mi.train_and_eval_differ else ("train",)


CATEGORIES = [(d, m, r) for d in DTYPES for m in ("train", "eval") for r in DIRECTIONS]


def _decorator_exclusion(mi, dtype, training):
    """Why PyTorch's parity test does not run the module on this device and
    dtype (a skip or an expected failure among its decorators), or None."""
    kwargs = {"module_info": mi, "dtype": dtype, "training": training}
    for dec in mi.get_decorators(*PARITY_TEST, DEVICE, dtype, kwargs):
        fn = dec(lambda: None)
        if getattr(fn, "__unittest_skip__", False):
            return f"the ModuleInfo skips {PARITY_TEST[1]}: {fn.__unittest_skip_why__}"
        if getattr(fn, "__unittest_expecting_failure__", False):
            return f"the ModuleInfo expects {PARITY_TEST[1]} to fail"
    return None  # the others are tolerance overrides and other devices' skips


# ---- known failures -----------------------------------------------------------


def _load_known_failures():
    data = json.loads(KNOWN_FAILURES_FILE.read_text())
    table = {}
    for e in data["entries"]:
        key = (e["module"], e["dtype"], e["mode"], e["direction"])
        assert key not in table, f"duplicate known-failure entry {key}"
        assert e["module"] in MODULES, f"known-failure entry for an unknown ModuleInfo: {key}"
        assert e["dtype"] in DTYPES and e["direction"] in DIRECTIONS, f"unknown category in {key}"
        assert e["mode"] in _modes(MODULES[e["module"]]), f"the module has no such mode: {key}"
        assert e.get("reason"), f"known-failure entry without a reason: {key}"
        samples = e["samples"]
        assert samples == "all" or (isinstance(samples, list) and samples), key
        assert e.get("strict", True) in (True, False), f"strict must be true or false: {key}"
        table[key] = e
    return table


KNOWN_FAILURES = _load_known_failures()


# ---- statistics for the summary -------------------------------------------------

STATS = {c: {"pass": 0, "known": 0, "unexpected": 0, "xpass": 0, "excluded": 0,
             "tests": 0, "rounding": 0, "total": 0} for c in CATEGORIES}
RECORD = []
_START = time.monotonic()


def _summary_payload():
    """This process's part of the end-of-run summary (summaries.py), or None."""
    if not any(s["tests"] for s in STATS.values()):
        return None
    cap = f"at most {SAMPLES} samples per test" if SAMPLES else "all samples"
    rows = [(" ".join(cat), s, cap) for cat, s in STATS.items()]  # in order, empty ones too
    return summaries.payload(rows, RECORD, wall=time.monotonic() - _START)


summaries.register("module_db", _summary_payload)


# ---- running one sample ------------------------------------------------------------


def _is_packed(x):
    return isinstance(x, PackedSequence)


def _map_inputs(fn, x):
    """fn over the tensors of forward inputs; a PackedSequence keeps its
    batch_sizes, which must stay on CPU."""
    def leaf(v):
        if _is_packed(v):
            return PackedSequence(fn(v.data), v.batch_sizes,
                                  None if v.sorted_indices is None else fn(v.sorted_indices),
                                  None if v.unsorted_indices is None else fn(v.unsorted_indices))
        return fn(v)
    return tree_map(leaf, x, is_leaf=_is_packed)


class _Case:
    """One sample of one ModuleInfo in one dtype and mode, runnable on any
    device and, for the float64 evaluation, in float64."""

    def __init__(self, mi, sample, dtype, training):
        self.mi, self.sample, self.dtype, self.training = mi, sample, dtype, training
        self.state = None
        m = self._build("cpu", dtype, sample.forward_input.args, sample.forward_input.kwargs)
        self.state = {k: v.detach().clone() for k, v in self._state_of(m).items()}

    @staticmethod
    def _state_of(m):
        return {**{"param " + k: v for k, v in m.named_parameters()},
                **{"buffer " + k: v for k, v in m.named_buffers()}}

    def _build(self, device, dtype, args, kwargs):
        c = self.sample.constructor_input
        torch.manual_seed(0)
        m = self.mi.module_cls(*c.args, **c.kwargs).to(dtype).to(device)
        m.train(self.training)
        if self.mi.is_lazy:
            with torch.no_grad():
                m(*args, **kwargs)
        if self.state is not None:
            mine = self._state_of(m)
            if mine.keys() != self.state.keys():
                raise AssertionError(f"the module built on {device} has other parameters and "
                                     f"buffers: {sorted(mine)} != {sorted(self.state)}")
            with torch.no_grad():
                for k, v in mine.items():
                    v.copy_(self.state[k])
        return m

    def _inputs(self, device, float64):
        f = self.sample.forward_input
        args, kwargs = _map_inputs(Copier(device), (f.args, f.kwargs))
        if float64:
            args, kwargs = _map_inputs(lambda t: to_float64(t) if isinstance(t, torch.Tensor)
                                       else t, (args, kwargs))
        return args, kwargs

    def forward(self, device, float64=False):
        args, kwargs = self._inputs(device, float64)
        m = self._build(device, torch.float64 if float64 else self.dtype, args, kwargs)
        with torch.no_grad():
            out = m(*args, **kwargs)
            results = [("output", out)]
            # The sample's own reference computation (what PyTorch's test_forward
            # checks the output against), e.g. the transformers' fused fast path.
            if self.sample.reference_fn is not None:
                try:
                    ref = self.sample.reference_fn(m, *args, **kwargs)
                except Exception as e:  # noqa: BLE001 - neuron must raise alike
                    # Many reference_fns use tensors they captured on CPU when
                    # the sample was made (loss weights): not runnable on neuron.
                    captured = "expected all tensors on one device" in str(e)
                    ref = CAPTURED_CPU if captured else f"raised {type(e).__name__}"
                results.append(("the sample's reference_fn", ref))
        return results + [("module parameters and buffers after the forward", self._state_of(m)),
                          ("tensor arguments after the forward", tensors((args, kwargs)))]

    def backward(self, device, float64=False):
        args, kwargs = self._inputs(device, float64)
        m = self._build(device, torch.float64 if float64 else self.dtype, args, kwargs)
        out = m(*args, **kwargs)
        outs = [t for t in tensors(out) if t.requires_grad]
        if not outs:
            raise Excluded("no differentiable output")
        g = torch.Generator().manual_seed(0)
        # Drawn in the sample's dtype, so that the float64 evaluation sees the same values.
        grad_outs = [torch.randn(o.shape, generator=g).to(self.dtype).to(device=device,
                                                                       dtype=o.dtype)
                     for o in outs]
        inputs = [t for t in tensors((args, kwargs)) if t.requires_grad]
        params = [(k, p) for k, p in m.named_parameters() if p.requires_grad]
        grads = torch.autograd.grad(outs, inputs + [p for _, p in params], grad_outs,
                                    allow_unused=True)
        return [("differentiable outputs", outs), ("input gradients", list(grads[:len(inputs)])),
                ("parameter gradients", dict(zip((k for k, _ in params), grads[len(inputs):])))]


def _no_cpu_kernel(e):
    """The exclusion reason when CPU has no kernel for the sample's dtype
    (ATen's "... not implemented for 'BFloat16'"), else None."""
    msg = str(e)
    if isinstance(e, (NotImplementedError, RuntimeError)) and "not implemented for '" in msg:
        return f"CPU has no kernel for the dtype: {msg.splitlines()[0][:120]}"
    return None


def check_sample(case, direction):
    """"pass" when neuron agrees with CPU on the sample, "rounding" when it
    differs from CPU only as two roundings of one float64 result do; raises
    Excluded when the sample cannot be compared, and AssertionError (or the
    neuron run's error) when neuron disagrees."""
    run = getattr(case, direction)
    try:
        torch.manual_seed(1)
        expected = run("cpu")
        torch.manual_seed(2)
        again = run("cpu")
    except Excluded:
        raise
    except Exception as e:
        cpu_error = f"{type(e).__name__}: {e}"
        try:
            torch.manual_seed(1)
            run(DEVICE)
            sync()
        except Exception:
            drain()
            raise Excluded(_no_cpu_kernel(e) or
                           f"the CPU reference rejects it ({type(e).__name__})") from None
        raise AssertionError(f"neuron accepts a sample the CPU reference rejects: {cpu_error}")
    try:
        compare(again, expected, "CPU repeat")
    except AssertionError:
        raise Excluded("nondeterministic: two CPU runs with different seeds differ") from None
    reference, rounding = None, False
    for attempt in ("first", "second"):
        torch.manual_seed(1)
        try:
            actual = run(DEVICE)
        except Excluded as e:  # the CPU run had it, so this is a difference
            raise AssertionError(f"{attempt} neuron run: {e}") from None
        check_on_neuron([v for what, v in actual if what != "tensor arguments after the forward"])
        actual = tree_map(to_cpu, actual)
        sync()
        for (what, a), (_, e) in zip(actual, expected):
            if a is CAPTURED_CPU:
                continue
            try:
                compare(a, e, f"{attempt} neuron run, {what}")
            except AssertionError as mismatch:
                if reference is None:
                    reference = _float64_reference(case, run)
                why = rounding_verdict(what, a, e, reference)
                if why:
                    raise AssertionError(f"{mismatch}\nagainst a float64 evaluation: {why}") from None
                rounding = True
    return "rounding" if rounding else "pass"


def _float64_reference(case, run):
    if torch.float64 not in case.mi.dtypes:
        return "the ModuleInfo does not list float64"
    try:
        torch.manual_seed(1)
        return run("cpu", float64=True)
    except Exception as e:  # noqa: BLE001
        return f"the float64 evaluation raised {type(e).__name__}: {e}"


# ---- the tests -------------------------------------------------------------------


def _spread(n, k):
    """k of the indices 0..n-1, evenly spread, first and last included."""
    if not k or n <= k:
        return list(range(n))
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def run_module(name, dtype_name, mode, direction):
    mi = MODULES[name]
    dtype = getattr(torch, dtype_name)
    training = mode == "train"
    why = _decorator_exclusion(mi, dtype, training)
    if why:
        pytest.skip(why)
    stats = STATS[(dtype_name, mode, direction)]
    stats["tests"] += 1
    known = KNOWN_FAILURES.get((name, dtype_name, mode, direction))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        samples = list(mi.module_inputs_func(mi, device="cpu", dtype=dtype,
                                             requires_grad=direction == "backward",
                                             training=training))
        stats["total"] += len(samples)
        chosen = _spread(len(samples), SAMPLES)
        listed = set()
        if known:
            listed = set(range(len(samples))) if known["samples"] == "all" else set(known["samples"])
            listed &= set(chosen)
        failures, passed, excluded, rounding = {}, [], {}, []
        for i in chosen:
            sample = samples[i]
            if sample.forward_input is None:
                excluded[i] = "the sample has no forward input"
                continue
            try:
                case = _Case(mi, sample, dtype, training)
            except Exception as e:  # noqa: BLE001
                excluded[i] = (_no_cpu_kernel(e) or
                               f"the module cannot be built on CPU ({type(e).__name__})")
                continue
            try:
                if check_sample(case, direction) == "rounding":
                    rounding.append(i)
                passed.append(i)
            except Excluded as e:
                excluded[i] = str(e)
            except Exception as e:  # noqa: BLE001 - any error of the neuron run is a failure
                drain()
                failures[i] = short(e)
    verdict = Verdict(known, len(chosen), passed, failures, excluded, listed)
    stats["pass"] += len(passed)
    stats["known"] += len(verdict.expected_fail)
    stats["unexpected"] += len(verdict.unexpected)
    stats["xpass"] += len(verdict.xpass)
    stats["excluded"] += len(excluded)
    stats["rounding"] += len(rounding)
    for i, m in sorted(failures.items()):
        RECORD.append({"module": name, "dtype": dtype_name, "mode": mode, "direction": direction,
                       "sample": i, "n_samples": len(samples), "error": m})
    verdict.conclude(KNOWN_FAILURES_FILE.name, nothing="the ModuleInfo has no samples")


pytestmark = pytest.mark.timeout(TIMEOUT_S, method="thread")
PARAMS = [pytest.param(name, d, m, id=f"{name}-{d}-{m}")
          for name, mi in MODULES.items() for d in DTYPES for m in _modes(mi)]


@pytest.mark.parametrize("name,dtype_name,mode", PARAMS)
def test_forward(name, dtype_name, mode):
    run_module(name, dtype_name, mode, "forward")


@pytest.mark.parametrize("name,dtype_name,mode", PARAMS)
def test_backward(name, dtype_name, mode):
    run_module(name, dtype_name, mode, "backward")
