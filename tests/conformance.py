"""What the conformance suites (test_opinfo.py, test_module_db.py) share: copying
samples to the device with their exact layout, comparing results with CPU at
assert_close's default tolerances, judging a mismatch against a float64
evaluation (rounding), and the known-failures verdict of one test.

Not a test file: pytest collects only test_*.py; the suites import it from
this directory.
"""
import pytest
import torch
from torch.utils._pytree import tree_flatten

DEVICE = "neuron"


# ---- copying samples between devices -----------------------------------------------


class Copier:
    """Copies the tensors of a sample to a device, keeping their exact layout and
    the storage sharing between them (a CPU storage maps to one copy)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.storages = {}  # (data_ptr, nbytes, dtype) -> flat copy
        self.tensors = {}  # id(tensor) -> copy

    def tensor(self, t):
        if id(t) in self.tensors:
            return self.tensors[id(t)]
        with torch.no_grad():
            if t.layout != torch.strided or t.is_quantized or t.is_nested:
                c = t.detach().to(self.device)
            else:
                st = t.untyped_storage()
                key = (st.data_ptr(), st.nbytes(), t.dtype)
                flat = self.storages.get(key)
                if flat is None:
                    n = st.nbytes() // t.element_size()
                    src = torch.empty(0, dtype=t.dtype).set_(st, 0, (n,), (1,))
                    flat = src.to(self.device, copy=True)
                    self.storages[key] = flat
                c = flat.as_strided(t.shape, t.stride(), t.storage_offset())
                if t.is_conj():
                    c = c.conj()
                if t.is_neg():
                    c = c._neg_view()
            c = c.detach()
        c.requires_grad_(t.requires_grad)
        self.tensors[id(t)] = c
        return c

    def __call__(self, x):
        if isinstance(x, torch.Tensor):
            return self.tensor(x)
        if isinstance(x, torch.device) and x.type == "cpu":
            return self.device
        if isinstance(x, str) and x == "cpu":
            return self.device.type
        return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    return x


def sync():
    torch.neuron.synchronize()


def drain():
    """Consumes an asynchronous failure left on the stream by a failed sample."""
    for _ in range(2):
        try:
            sync()
            return
        except Exception:
            pass


# ---- comparing -------------------------------------------------------------------


def compare(actual, expected, what):
    """assert_close (default tolerances, NaN == NaN) on tensors and numbers,
    recursing through sequences and mappings; anything else compares with ==."""
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        torch.testing.assert_close(actual, expected, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(actual) != len(expected):
            raise AssertionError(f"{what}: {len(actual)} items != {len(expected)} items")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, f"{what}[{i}]")
    elif isinstance(expected, dict) and isinstance(actual, dict):
        if actual.keys() != expected.keys():
            raise AssertionError(f"{what}: keys {sorted(actual)} != {sorted(expected)}")
        for k in expected:
            compare(actual[k], expected[k], f"{what}[{k!r}]")
    elif isinstance(expected, (int, float, complex)) and not isinstance(expected, bool) \
            and isinstance(actual, (int, float, complex)) and not isinstance(actual, bool):
        torch.testing.assert_close(actual, expected, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
    elif type(actual) is not type(expected) or actual != expected:
        raise AssertionError(f"{what}: {actual!r} != {expected!r}")


def tensors(x):
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def check_on_neuron(result):
    for t in tensors(result):
        if t.device.type != DEVICE:
            raise AssertionError(f"a result of the neuron run is on {t.device}, not on {DEVICE}")


class Excluded(Exception):
    """The sample cannot be compared; the message says why."""


# ---- rounding: judged against float64 ------------------------------------------------
#
# Two correct float32 (or bfloat16) implementations that sum in different
# orders -- the device's kernels against CPU's, one instruction set against
# another -- can differ beyond assert_close's default tolerance where an op
# amplifies rounding (large sums, cancellation). Such a difference is not
# listed per sample (which samples it hits depends on the CPU): when neuron
# and CPU disagree, the sample is evaluated on CPU in float64, and it passes
# as rounding when, for every floating tensor, neuron is no further from the
# float64 result than twice CPU's distance plus one ulp of the largest value
# (the rule the Hugging Face coverage tool applies to gradients).


def to_float64(x):
    if isinstance(x, torch.dtype):
        return torch.float64 if x.is_floating_point else x
    if x.is_floating_point() and x.dtype != torch.float64:
        return x.detach().to(torch.float64).requires_grad_(x.requires_grad)
    return x


def rounding_verdict(what, actual, expected, reference):
    """"" when neuron's `what` is as close to the float64 result as CPU's is,
    else why not."""
    if isinstance(reference, str):
        return reference
    ref = dict(reference).get(what)
    leaves = [tree_flatten(x)[0] for x in (actual, expected, ref)]
    if len({len(x) for x in leaves}) != 1:
        return f"{what}: the float64 results have another structure"
    for a, e, r in zip(*leaves):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point():
            try:
                compare(a, e, what)
            except AssertionError as err:
                return str(err)
            continue
        if not isinstance(r, torch.Tensor) or r.shape != a.shape or e.shape != a.shape:
            return f"{what}: the float64 results have other shapes"
        a64, e64, r64 = (t.detach().to(torch.float64) for t in (a, e, r))
        finite = torch.isfinite(a64) & torch.isfinite(e64)
        if not torch.equal(a64[~finite].nan_to_num(), e64[~finite].nan_to_num()) or \
                not torch.equal(torch.isnan(a64), torch.isnan(e64)):
            return f"{what}: non-finite values differ from CPU's"
        if not finite.any():
            continue
        err_neuron = (a64 - r64)[finite].abs().max().item()
        err_cpu = (e64 - r64)[finite].abs().max().item()
        ulp = torch.finfo(a.dtype).eps * r64[finite].abs().max().item()
        if err_neuron > 2 * err_cpu + ulp:
            return (f"{what}: neuron is {err_neuron:.3g} from float64, CPU {err_cpu:.3g} "
                    f"(allowed: twice CPU's plus one {a.dtype} ulp of the largest value, "
                    f"{2 * err_cpu + ulp:.3g})")
    return ""


def short(e):
    msg = f"{type(e).__name__}: {e}".strip()
    return msg if len(msg) < 500 else msg[:500] + " ..."


# ---- the verdict of one test -------------------------------------------------------


class Verdict:
    """Sample outcomes of one test held against its known-failure entry.

    `listed` are the entry's sample indices, `crashed` the listed ones that were
    not run (crash entries). A listed sample that fails is expected; a failure
    that is not listed is not; a listed sample that passes is an error too
    (strict), unless the entry says "strict": false: then its samples may pass
    or fail, for differences whose size depends on rounding in kernels that
    differ between CPUs (its reason says why)."""

    def __init__(self, known, n_samples, passed, failures, excluded, listed, crashed=frozenset()):
        self.known, self.n_samples = known, n_samples
        self.passed, self.excluded = passed, excluded
        self.expected_fail = set(crashed) | (listed & set(failures))
        self.unexpected = {i: m for i, m in failures.items() if i not in listed}
        self.xpass = sorted(set(passed) & listed) if known and known.get("strict", True) else []

    def conclude(self, known_file, nothing="no samples"):
        """Fails, xfails or skips the running test as the outcomes require
        (returns when every sample that ran passed)."""
        problems = []
        if self.unexpected:
            by_msg = {}
            for i, m in sorted(self.unexpected.items()):
                by_msg.setdefault(m, []).append(i)
            lines = [f"  samples {idx}: {m}" for m, idx in by_msg.items()]
            problems.append(f"{len(self.unexpected)}/{self.n_samples} samples fail on neuron and "
                            f"are not in {known_file}:\n" + "\n".join(lines))
        if self.xpass:
            problems.append(f"known failure now passes for samples {self.xpass}: update "
                            f"{known_file} (entry reason: {self.known['reason']})")
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)
        if self.expected_fail:
            pytest.xfail(f"{len(self.expected_fail)}/{self.n_samples} samples: "
                         f"{self.known['reason']}")
        if not self.passed:
            reasons = sorted(set(self.excluded.values())) or [nothing]
            pytest.skip(f"no comparable sample ({len(self.excluded)} excluded: "
                        f"{'; '.join(reasons)})")
