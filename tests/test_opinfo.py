"""Op conformance: PyTorch's OpInfo database run on `neuron` and compared with CPU.

Every OpInfo in `torch.testing._internal.common_methods_invocations.op_db` is
run sample by sample on `neuron` and on CPU, and the results are compared with
`torch.testing.assert_close` at its default tolerances for the dtype (NaNs
compare equal, as in PyTorch's own OpInfo tests). Tolerances are never
loosened. Categories (one pytest test per OpInfo and category):

  float32 forward    test_forward_float32: the op's outputs, plus the sample's
                     tensor arguments afterwards (catches stray writes)
  bfloat16 forward   test_forward_bfloat16: the same in bfloat16, for the
                     OpInfos that list bfloat16 on CPU
  float32 backward   test_backward_float32: gradients w.r.t. the sample's tensor
                     inputs that require grad, for a fixed random grad_output,
                     for the OpInfos that support float32 autograd on CPU
  float32 in-place   test_inplace_float32: the OpInfo's in-place variant
                     (x.op_(...)): the written tensors, the result, and that
                     the result is the input tensor itself
  float32 out=       test_out_float32: the out= variant with empty out
                     tensors (which the op must resize): the out tensors, the
                     result, and that the result is the out tensors themselves
  compiled           test_compiled_forward_float32, test_compiled_forward_bfloat16,
                     test_compiled_backward_float32: the same as the eager
                     forward and backward categories, with the op called inside
                     torch.compile(backend="neuron") (Dynamo, AOTAutograd, the
                     backend's executor). Each sample is compiled for its own
                     signature (dynamic=False, Dynamo reset), and the second
                     run must reuse that compilation (no recompile). A sample
                     whose op Dynamo runs eagerly (a graph break at the op, as
                     for item) is excluded, reported as such.

How a sample is run: the OpInfo's samples are generated on CPU (seeded by the
OpInfo machinery, so a sample index always names the same input), then copied
to `neuron` with their exact layout (strides, storage offset, and storage
shared between arguments are kept) and with `device='cpu'` arguments turned
into `device='neuron'`. The op runs on both copies (twice on neuron: the
backend runs the first call of each argument signature synchronously and
queues the later ones, and both must agree with CPU); the sample's
`output_process_fn_grad` is applied to both results, as in PyTorch's
test_compare_cpu; every tensor output of the neuron run must be on `neuron`.

Sample cap: none by default for the eager path, every sample of every OpInfo
runs (about 4 minutes on a 2-core machine). TORCHNEURON_OPINFO_MAX_SAMPLES=N
runs only the first N samples of each OpInfo; the summary names the cap. The
compiled path compiles every sample (~0.5 s each), so the test command runs
its sampled form: the first sample of one OpInfo in 4
(TORCHNEURON_OPINFO_COMPILE_MAX_SAMPLES, TORCHNEURON_OPINFO_COMPILE_OP_STRIDE);
the full form is

    TORCHNEURON_OPINFO_COMPILE_MAX_SAMPLES=0 TORCHNEURON_OPINFO_COMPILE_OP_STRIDE=1 \
        .venv/bin/python -m pytest tests/test_opinfo.py -k compiled

Excluded samples (reported, never counted as passes):
  * ops whose outputs are random or uninitialized: the OpInfo's own
    test_compare_cpu skips ("output is non-deterministic", "undefined
    outputs", ...) and RANDOM_OPS below;
  * samples whose CPU result changes between two runs with different seeds
    (e.g. attention with dropout_p > 0);
  * samples the CPU reference itself rejects (neuron must then reject them
    too, or the sample fails);
  * samples with no tensor and no device argument (the op never reaches
    neuron; out= samples still run, their out tensors are on neuron);
    backward samples without a differentiable output; in-place samples that
    broadcast their input; out= samples whose output is not a tensor or a
    tuple of tensors.

Rounding: when neuron and CPU disagree beyond the default tolerance, the
sample is also evaluated on CPU in float64; it passes (counted, and reported
as a rounding pass) when neuron is no further from that result than twice
CPU's distance plus one ulp of the largest value (see rounding_verdict in
conformance.py, shared with test_module_db.py).
Two float32 implementations that sum in different orders differ by roundings
that depend on the instruction set, so such differences are never listed per
sample.

Known failures live in tests/opinfo_known_failures.json: one entry per
(op, path, dtype, direction) with the failing sample indices (or "all") and a
reason; "path" is "eager" when absent, and an eager entry whose reason starts
with "not supported by design" (a dtype or layout the device lacks) holds for
the compiled path too. A listed sample that fails is expected (the test reports xfail); a
failure that is not listed fails the test; a listed sample that passes fails
the test too (strict, like xfail(strict=True): remove it from the list),
unless the entry says "strict": false: then its samples may pass or fail,
for differences whose size depends on the CPU's kernels (the reason says why).
Entries whose reason starts with "crash:" are never run: they would kill the
whole pytest process (TORCHNEURON_OPINFO_RUN_CRASHES=1 runs them anyway, to
check one with -k whether it still crashes).

The pytest run ends with one summary line per category, e.g.
"opinfo float32 forward: N/M samples pass (P%)". Known failures and crash
entries count as failing samples there; excluded samples are not counted.

Hangs: pytest-timeout limits every test to TIMEOUT_S seconds with the thread
method (a wait inside the runtime cannot be interrupted by a signal, so a hang
dumps every thread's stack and ends the run instead of blocking it forever).

TORCHNEURON_OPINFO_RECORD=<file.json> writes every failing sample (listed or
not) with its error to that file, which helps when updating the list.
"""
import functools
import itertools
import json
import os
import pathlib
import time
import unittest.mock
import warnings

import pytest
import torch
import torchneuron
from torch.testing._internal import common_methods_invocations
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import summaries
from conformance import (DEVICE, Copier, Excluded, Verdict, check_on_neuron, compare, drain,
                         rounding_verdict, short, sync, tensors, to_cpu, to_float64)

MAX_SAMPLES = int(os.environ.get("TORCHNEURON_OPINFO_MAX_SAMPLES", "0"))
# The compiled path compiles every sample (a Dynamo trace, AOTAutograd and the
# backend, ~0.1-1 s each): the test command runs the first few samples per op,
# 0 runs them all (the full form, documented in tests/README.md).
COMPILE_MAX_SAMPLES = int(os.environ.get("TORCHNEURON_OPINFO_COMPILE_MAX_SAMPLES", "1"))
# ... and compiles one OpInfo in COMPILE_OP_STRIDE (in op_db's order); 1 = all.
COMPILE_OP_STRIDE = int(os.environ.get("TORCHNEURON_OPINFO_COMPILE_OP_STRIDE", "4"))
RUN_CRASHES = os.environ.get("TORCHNEURON_OPINFO_RUN_CRASHES") == "1"
TIMEOUT_S = 120  # per test (one OpInfo, one category); the slowest takes ~5 s
KNOWN_FAILURES_FILE = pathlib.Path(__file__).with_name("opinfo_known_failures.json")
# (path, dtype, direction): the summary's name of the category. Path "eager"
# runs the op as the user's eager call does, "compile" runs it inside
# torch.compile(backend="neuron") (Dynamo, AOTAutograd, the backend).
CATEGORIES = {
    ("eager", "float32", "forward"): "float32 forward",
    ("eager", "bfloat16", "forward"): "bfloat16 forward",
    ("eager", "float32", "backward"): "float32 backward",
    ("eager", "float32", "inplace"): "float32 in-place variant",
    ("eager", "float32", "out"): "float32 out= variant",
    ("compile", "float32", "forward"): "compiled float32 forward",
    ("compile", "bfloat16", "forward"): "compiled bfloat16 forward",
    ("compile", "float32", "backward"): "compiled float32 backward",
}

# Ops whose results are random or uninitialized, besides the ones the OpInfos
# themselves mark as not comparable with CPU (see _opinfo_exclusion). The
# neuron generator is not the CPU generator, so their values cannot match.
RANDOM_OPS = {
    "bernoulli": "samples from a random distribution",
    "cauchy": "samples from a random distribution",
    "exponential": "samples from a random distribution",
    "geometric": "samples from a random distribution",
    "log_normal": "samples from a random distribution",
    "multinomial": "samples from a random distribution",
    "normal": "samples from a random distribution",
    "normal.in_place": "samples from a random distribution",
    "normal.number_mean": "samples from a random distribution",
    "uniform": "samples from a random distribution",
    "rand_like": "random factory",
    "randn_like": "random factory",
    "randint_like": "random factory",
    "randn": "random factory",
    "randint": "random factory",
    "nn.functional.dropout": "random mask",
    "nn.functional.dropout2d": "random mask",
    "nn.functional.dropout3d": "random mask",
    "nn.functional.alpha_dropout": "random mask",
    "nn.functional.feature_alpha_dropout.with_train": "random mask",
    "nn.functional.rrelu": "random slopes in training mode",
    "nn.functional.fractional_max_pool2d": "random pooling regions",
    "nn.functional.fractional_max_pool3d": "random pooling regions",
    "svd_lowrank": "randomized algorithm",
    "pca_lowrank": "randomized algorithm",
    "empty": "uninitialized memory",
    "empty_like": "uninitialized memory",
    "empty_strided": "uninitialized memory",
    "empty_permuted": "uninitialized memory",
    "new_empty": "uninitialized memory",
    "new_empty_strided": "uninitialized memory",
}

# Reasons of the OpInfos' own TestCommon.test_compare_cpu skips that mean "the
# outputs cannot be compared"; the other skips and expected failures there
# (CUDA precision and the like) do not apply to a backend that runs ATen's CPU
# kernels.
_NOT_COMPARABLE_WORDS = ("non-deterministic", "nondeterministic", "undefined", "random")

# Sample arguments that the op requires on CPU whatever the device of the other
# arguments: (OpInfo, index in sample.args).
CPU_ARGS = {
    ("tensor_split", 0): "indices_or_sections must be a CPU tensor",
}


def op_id(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


OPS = {op_id(op): op for op in op_db}
assert len(OPS) == len(op_db), "OpInfo ids are not unique"


def _skip_reason(decorator):
    fn = decorator(lambda: None)
    return getattr(fn, "__unittest_skip_why__", None) if getattr(fn, "__unittest_skip__", False) else None


def _opinfo_exclusion(op, dtype):
    """Why the op's results cannot be compared with CPU, or None."""
    oid = op_id(op)
    if oid in RANDOM_OPS:
        return f"random op ({RANDOM_OPS[oid]})"
    for info in op.decorators:
        if not hasattr(info, "is_active"):
            continue
        if not info.is_active("TestCommon", "test_compare_cpu", DEVICE, dtype, {}):
            continue
        for dec in info.decorators:
            why = _skip_reason(dec)
            # "non-deterministic (when dropout_p > 0)": only some samples are
            # random, and the per-sample check in check_sample finds them.
            if why and "(when" not in why and any(w in why.lower() for w in _NOT_COMPARABLE_WORDS):
                return f"the OpInfo marks it not comparable with CPU: {why}"
    return None


def _applies(op, dtype, direction):
    """None if the category applies to the op, else why not."""
    if direction == "backward":
        if not op.supports_autograd or dtype not in op.supported_backward_dtypes("cpu"):
            return f"the OpInfo does not support {dtype} autograd on CPU"
        return None
    if dtype not in op.supported_dtypes("cpu"):
        return f"the OpInfo does not list {dtype} on CPU"
    if direction == "inplace" and op.inplace_variant is None:
        return "the OpInfo has no in-place variant"
    if direction == "out" and not op.supports_out:
        return "the OpInfo has no out= variant"
    return None


# ---- known failures -----------------------------------------------------------


def _load_known_failures():
    data = json.loads(KNOWN_FAILURES_FILE.read_text())
    table = {}
    for e in data["entries"]:
        key = (e["op"], e.get("path", "eager"), e["dtype"], e["direction"])
        assert key not in table, f"duplicate known-failure entry {key}"
        assert e["op"] in OPS, f"known-failure entry for an unknown OpInfo: {e['op']}"
        assert key[1:] in CATEGORIES, f"unknown category in {key}"
        assert e.get("reason"), f"known-failure entry without a reason: {key}"
        samples = e["samples"]
        assert samples == "all" or (isinstance(samples, list) and samples), key
        assert e.get("strict", True) in (True, False), f"strict must be true or false: {key}"
        table[key] = e
    return table


KNOWN_FAILURES = _load_known_failures()
BY_DESIGN = "not supported by design"


def _known_failure(oid, path, dtype_name, direction):
    """The entry for the test. An eager entry whose reason starts with "not
    supported by design" (a dtype or layout the device does not have) holds
    for the compiled path too, unless the compiled path has its own entry."""
    entry = KNOWN_FAILURES.get((oid, path, dtype_name, direction))
    if entry is None and path != "eager":
        eager = KNOWN_FAILURES.get((oid, "eager", dtype_name, direction))
        if eager is not None and eager["reason"].startswith(BY_DESIGN):
            entry = eager
    return entry


# ---- statistics for the summary -------------------------------------------------

STATS = {c: {"pass": 0, "known": 0, "unexpected": 0, "xpass": 0, "excluded": 0,
             "random_ops": 0, "tests": 0, "rounding": 0} for c in CATEGORIES}
RECORD = []
_START = time.monotonic()


def _summary_payload():
    """This process's part of the end-of-run summary (summaries.py), or None."""
    if not any(s["tests"] for s in STATS.values()):
        return None
    rows = []  # every category, in order (summaries.py leaves out those with no tests)
    for cat, s in STATS.items():
        limit = _sample_cap(cat[0])
        cap = f"first {limit} samples per op" if limit else "all samples"
        if cat[0] == "compile" and COMPILE_OP_STRIDE > 1:
            cap += f", one OpInfo in {COMPILE_OP_STRIDE}"
        rows.append((CATEGORIES[cat], s, cap))
    ops_by_path = {}
    for op, counts in torchneuron.executed_ops().items():
        for path in counts:
            ops_by_path.setdefault(path, []).append(op)
    return summaries.payload(rows, RECORD, ops_by_path, time.monotonic() - _START)


summaries.register("opinfo", _summary_payload)


# ---- copying samples between devices -----------------------------------------------


def _touches_device(sample):
    """Whether the sample has a tensor or a device argument, so that the op runs
    on `neuron` once the sample is copied there."""
    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return any(isinstance(x, (torch.Tensor, torch.device)) or (isinstance(x, str) and x == "cpu")
               for x in leaves)


def _copy_sample(oid, sample, device):
    cp = Copier(device)
    inp = tree_map(cp, sample.input)
    args = tuple(a if (oid, i) in CPU_ARGS else tree_map(cp, a)
                 for i, a in enumerate(sample.args))
    kwargs = tree_map(cp, sample.kwargs)
    return inp, args, kwargs


def _float64_reference(oid, op, sample, run):
    """The sample's results evaluated on CPU in float64, or the reason there
    are none (the op lacks float64, or rejects the converted sample)."""
    if not op.supports_dtype(torch.float64, "cpu"):
        return "the op has no float64 kernel on CPU"
    try:
        torch.manual_seed(1)
        return run(oid, op, sample.transform(to_float64), "cpu")
    except Exception as e:  # noqa: BLE001
        return f"the float64 evaluation raised {type(e).__name__}: {e}"


# ---- running one sample ------------------------------------------------------------
#
# Each runner runs a sample on one device and returns [(what, value)] to compare
# between the neuron run and the CPU run.


def _run_forward(oid, op, sample, device, call=None):
    inp, args, kwargs = _copy_sample(oid, sample, device)
    out = sample.output_process_fn_grad((call or op)(inp, *args, **kwargs))
    return [("output", out), ("tensor arguments after the op", tensors((inp, args, kwargs)))]


def _run_inplace(oid, op, sample, device, call=None):
    if sample.broadcasts_input:
        raise Excluded("the sample broadcasts its input, which in-place ops reject")
    inp, args, kwargs = _copy_sample(oid, sample, device)
    out = op.inplace_variant(inp, *args, **kwargs)
    return [("output", out), ("output is the input tensor", out is inp),
            ("tensor arguments after the op", tensors((inp, args, kwargs)))]


def _run_out(oid, op, sample, device, call=None):
    ci, ca, ck = _copy_sample(oid, sample, "cpu")
    ref = op(ci, *ca, **ck)  # only for the number, dtypes and kinds of the outputs
    if isinstance(ref, torch.Tensor):
        out = torch.empty(0, dtype=ref.dtype, device=device)
    elif isinstance(ref, (tuple, list)) and ref and all(isinstance(t, torch.Tensor) for t in ref):
        out = tuple(torch.empty(0, dtype=t.dtype, device=device) for t in ref)
    else:
        raise Excluded("the output is not a tensor or a tuple of tensors")
    inp, args, kwargs = _copy_sample(oid, sample, device)
    ret = op(inp, *args, out=out, **kwargs)
    if isinstance(out, tuple):
        same = isinstance(ret, (tuple, list)) and len(ret) == len(out) and \
            all(r is o for r, o in zip(ret, out))
    else:
        same = ret is out
    return [("out= tensors", out), ("output", ret), ("output is the out= tensors", same),
            ("tensor arguments after the op", tensors((inp, args, kwargs)))]


def _run_backward(oid, op, sample, device, call=None):
    inp, args, kwargs = _copy_sample(oid, sample, device)
    out = sample.output_process_fn_grad((call or op)(inp, *args, **kwargs))
    outs = [t for t in tensors(out) if t.requires_grad]
    if not outs:
        raise Excluded("no differentiable output")
    g = torch.Generator().manual_seed(0)
    grad_outs = [torch.randn(o.shape, generator=g).to(device=device, dtype=o.dtype)
                 for o in outs]
    leaves = [t for t in tensors((inp, args, kwargs)) if t.requires_grad]
    grads = torch.autograd.grad(outs, leaves, grad_outs, allow_unused=True)
    return [("differentiable outputs", outs), ("gradients", list(grads))]


RUNNERS = {"forward": _run_forward, "inplace": _run_inplace, "out": _run_out,
           "backward": _run_backward}


def _call_unseeded(fn, *args, **kwargs):
    return fn(*args, **kwargs)


# OpInfo's own seeding, taken before the compiled path patches it away.
_seeded_like_opinfo = common_methods_invocations.wrapper_set_seed


class _Compiled:
    """The op inside torch.compile(backend="neuron") for one sample: a fresh
    Dynamo state, so that each sample is compiled for its own signature (the
    wrapper's code object is shared by every op, and Dynamo's cache is per code
    object: without the reset, samples would hit its recompile limit and run
    eagerly). Counts the graphs the backend compiled."""

    def __init__(self, op):
        torch._dynamo.reset()
        torchneuron.reset_compile_metrics()

        def call(*args, **kwargs):
            return op.op(*args, **kwargs)

        self.fn = torch.compile(call, backend="neuron", dynamic=False)

    def __call__(self, *args, **kwargs):
        # Some OpInfos (scaled_dot_product_attention, item, the random ops)
        # wrap their function in wrapper_set_seed, which seeds the RNG inside
        # freeze_rng_state: a graph break inside a context manager, after which
        # Dynamo runs the whole frame eagerly. So the seeding moves outside the
        # compiled function: the CPU reference of a sample such as attention
        # with dropout_p > 0 is seeded, and the device run must draw the same
        # mask under the same seed.
        with unittest.mock.patch.object(common_methods_invocations, "wrapper_set_seed",
                                        _call_unseeded):
            return _seeded_like_opinfo(self.fn, *args, **kwargs)

    @staticmethod
    def graphs():
        return len(torchneuron.compile_metrics())


def _compiled_run(oid, op, sample, run):
    """The two neuron runs of the compiled path: the first compiles, the second
    must reuse what the first compiled (same signature, no recompilation)."""
    compiled = _Compiled(op)

    def first():
        actual = run(oid, op, sample, DEVICE, compiled)
        if not _Compiled.graphs():
            raise Excluded("Dynamo compiled no graph (the op ran eagerly after a graph break)")
        first.graphs = _Compiled.graphs()
        return actual

    def second():
        actual = run(oid, op, sample, DEVICE, compiled)
        if _Compiled.graphs() != first.graphs:
            reasons = [r["recompile_reason"] for r in torchneuron.compile_metrics()[first.graphs:]]
            raise AssertionError(f"an identical second call recompiled: {reasons}")
        return actual

    return first, second


def check_sample(oid, op, sample, direction, path="eager"):
    """Returns "pass" when neuron agrees with CPU on the sample, "rounding" when
    it differs from CPU only as two roundings of one float64 result do (see
    rounding_verdict); raises Excluded when the sample cannot be compared,
    and AssertionError (or the neuron run's error) when neuron disagrees."""
    if direction != "out" and not _touches_device(sample):  # out= tensors are on neuron
        raise Excluded("no tensor or device argument: the op runs on the default device (CPU)")
    run = RUNNERS[direction]
    try:
        torch.manual_seed(1)
        expected = run(oid, op, sample, "cpu")
        torch.manual_seed(2)
        again = run(oid, op, sample, "cpu")
    except Excluded:
        raise
    except Exception as e:
        cpu_error = f"{type(e).__name__}: {e}"
        try:
            torch.manual_seed(1)
            run(oid, op, sample, DEVICE)
            sync()
        except Exception:
            drain()
            raise Excluded(f"the CPU reference rejects it ({type(e).__name__})") from None
        raise AssertionError(f"neuron accepts a sample the CPU reference rejects: {cpu_error}")
    try:
        compare(again, expected, "CPU repeat")
    except AssertionError:
        raise Excluded("nondeterministic: two CPU runs with different seeds differ") from None
    # Twice on neuron: eagerly, the backend runs the first call of an argument
    # signature synchronously (checking its Meta kernel against the CPU kernel)
    # and queues later ones; compiled, the first call compiles and the second
    # reuses it. Both runs must agree with CPU.
    if path == "compile":
        runs = dict(zip(("first", "second"), _compiled_run(oid, op, sample, run)))
    else:
        runs = {attempt: functools.partial(run, oid, op, sample, DEVICE) for attempt in ("first", "second")}
    reference, rounding = None, False
    for attempt, neuron_run in runs.items():
        torch.manual_seed(1)
        try:
            actual = neuron_run()
        except Excluded as e:
            if path == "compile" and attempt == "first" and "compiled no graph" in str(e):
                raise
            raise AssertionError(f"{attempt} neuron run: {e}") from None  # the CPU run had it
        check_on_neuron([v for what, v in actual if what != "tensor arguments after the op"])
        actual = tree_map(to_cpu, actual)
        sync()
        for (what, a), (_, e) in zip(actual, expected):
            try:
                compare(a, e, f"{attempt} neuron run, {what}")
            except AssertionError as mismatch:
                if reference is None:
                    reference = _float64_reference(oid, op, sample, run)
                why = rounding_verdict(what, a, e, reference)
                if why:
                    raise AssertionError(f"{mismatch}\nagainst a float64 evaluation: {why}") from None
                rounding = True
    return "rounding" if rounding else "pass"


# ---- the tests -------------------------------------------------------------------


def _sample_cap(path):
    return COMPILE_MAX_SAMPLES if path == "compile" else MAX_SAMPLES


def _samples(op, dtype, direction, path):
    gen = op.sample_inputs("cpu", dtype, requires_grad=direction == "backward")
    if _sample_cap(path):
        gen = itertools.islice(gen, _sample_cap(path))
    return list(gen)


def run_op(oid, dtype_name, direction, path="eager"):
    op = OPS[oid]
    dtype = getattr(torch, dtype_name)
    why = _applies(op, dtype, direction)
    if why:
        pytest.skip(why)
    stats = STATS[(path, dtype_name, direction)]
    stats["tests"] += 1
    why = _opinfo_exclusion(op, dtype)
    if why:
        stats["random_ops"] += 1
        pytest.skip(f"excluded: {why}")
    known = _known_failure(oid, path, dtype_name, direction)
    listed, crash = set(), False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = _samples(op, dtype, direction, path)
        if known:
            listed = set(range(len(samples))) if known["samples"] == "all" else set(known["samples"])
            crash = known["reason"].startswith("crash:") and not RUN_CRASHES
        failures, passed, excluded, rounding = {}, [], {}, []
        for i, sample in enumerate(samples):
            if crash and i in listed:
                continue  # never run: it would take the whole process down
            try:
                if check_sample(oid, op, sample, direction, path) == "rounding":
                    rounding.append(i)
                passed.append(i)
            except Excluded as e:
                excluded[i] = str(e)
            except Exception as e:  # noqa: BLE001 - any error of the neuron run is a failure
                drain()
                failures[i] = short(e)
    crashed = listed & set(range(len(samples))) if crash else set()
    verdict = Verdict(known, len(samples), passed, failures, excluded, listed, crashed)
    stats["pass"] += len(passed)
    stats["known"] += len(verdict.expected_fail)
    stats["unexpected"] += len(verdict.unexpected)
    stats["xpass"] += len(verdict.xpass)
    stats["excluded"] += len(excluded)
    stats["rounding"] += len(rounding)
    for i, m in sorted(failures.items()):
        RECORD.append({"op": oid, "path": path, "dtype": dtype_name, "direction": direction, "sample": i,
                       "n_samples": len(samples), "error": m})
    verdict.conclude(KNOWN_FAILURES_FILE.name, nothing="the OpInfo has no samples")


pytestmark = pytest.mark.timeout(TIMEOUT_S, method="thread")
OP_IDS = [pytest.param(oid, id=oid) for oid in OPS]


@pytest.mark.parametrize("oid", OP_IDS)
def test_forward_float32(oid):
    run_op(oid, "float32", "forward")


@pytest.mark.parametrize("oid", OP_IDS)
def test_forward_bfloat16(oid):
    run_op(oid, "bfloat16", "forward")


@pytest.mark.parametrize("oid", OP_IDS)
def test_backward_float32(oid):
    run_op(oid, "float32", "backward")


@pytest.mark.parametrize("oid", OP_IDS)
def test_inplace_float32(oid):
    run_op(oid, "float32", "inplace")


@pytest.mark.parametrize("oid", OP_IDS)
def test_out_float32(oid):
    run_op(oid, "float32", "out")


COMPILED_OP_IDS = OP_IDS[::COMPILE_OP_STRIDE]


@pytest.mark.parametrize("oid", COMPILED_OP_IDS)
def test_compiled_forward_float32(oid):
    run_op(oid, "float32", "forward", "compile")


@pytest.mark.parametrize("oid", COMPILED_OP_IDS)
def test_compiled_forward_bfloat16(oid):
    run_op(oid, "bfloat16", "forward", "compile")


@pytest.mark.parametrize("oid", COMPILED_OP_IDS)
def test_compiled_backward_float32(oid):
    run_op(oid, "float32", "backward", "compile")
