"""What every stage uses: the stage list and sizes, the inputs, timeouts, error
text, device synchronization, the op counters and the plain comparisons."""
import contextlib
import os
import signal
import threading

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from .tiny_configs import PAD, VOCAB  # noqa: E402

STAGES = (
    "to_device", "forward", "generate_dynamic", "generate_static", "backward",
    "generate_padded", "sample", "forward_bf16", "sdpa_vs_eager", "pipeline",
    "compiled_forward", "compiled_generate",
)
# Last: a failure under torch.compile cannot change what the eager stages find.
COMPILED_STAGES = ("compiled_forward", "compiled_generate")
NEW_TOKENS = 16
EXTRA_TOKENS = 8  # for the stages after backward: shorter, to keep each architecture quick
BATCH, SEQ = 2, 8
PADDED_LENGTHS = (SEQ, SEQ - 3, SEQ - 6)
SEED = 0


class StageTimeout(Exception):
    pass


class NotApplicable(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds):
    """Raises StageTimeout in the main thread after `seconds` (no-op elsewhere).

    Python code is interrupted at the next bytecode; a wait inside a C++ call is
    not, so the parent process also bounds the whole architecture."""
    usable = seconds and hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise StageTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def short_error(exc, limit=300):
    text = f"{type(exc).__name__}: {exc}".strip().replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ops_snapshot():
    import torchneuron

    return {name: dict(paths) for name, paths in torchneuron.executed_ops().items()}


def ops_delta(before, after, path):
    """{op: count} of the ops that ran on `path` between two snapshots."""
    delta = {}
    for name, paths in after.items():
        n = paths.get(path, 0) - before.get(name, {}).get(path, 0)
        if n > 0:
            delta[name] = n
    return dict(sorted(delta.items()))


def path_totals(before, after):
    totals = {}
    for name, paths in after.items():
        for path, n in paths.items():
            d = n - before.get(name, {}).get(path, 0)
            if d > 0:
                totals[path] = totals.get(path, 0) + d
    return dict(sorted(totals.items()))


def sync_device(device):
    """Waits for the device; raises the error of failed queued work, if any."""
    if device.startswith("neuron"):
        torch.neuron.synchronize()


def drain(device):
    """Drops an error that failed queued work left, so the next stage starts clean."""
    with contextlib.suppress(Exception):
        sync_device(device)


def make_inputs(seed=SEED):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(PAD + 3, VOCAB, (BATCH, SEQ), generator=g)
    return ids, torch.ones_like(ids)


def make_padded_inputs(seed=SEED + 1):
    """(rows, ids, mask): rows of PADDED_LENGTHS tokens, left-padded with PAD."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(PAD + 3, VOCAB, (n,), generator=g) for n in PADDED_LENGTHS]
    ids = torch.full((len(rows), SEQ), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, SEQ - len(row):] = row
        mask[i, SEQ - len(row):] = 1
    return rows, ids, mask


def max_abs_diff(a, b):
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not torch.equal(torch.isfinite(a), torch.isfinite(b)):
        return float("inf")
    return float((a[finite] - b[finite]).abs().max()) if finite.any() else 0.0


def compare_logits(ref, got):
    got = got.cpu()
    torch.testing.assert_close(got, ref, equal_nan=True)
    return max_abs_diff(ref, got)


def compare_tokens(ref, got):
    got = got.cpu()
    if ref.shape != got.shape:
        raise AssertionError(f"generated shapes differ: cpu {tuple(ref.shape)} vs device {tuple(got.shape)}")
    diff = (ref != got).nonzero()
    if len(diff):
        r, c = diff[0].tolist()
        raise AssertionError(
            f"{len(diff)} tokens differ; first at row {r} position {c}: cpu {int(ref[r, c])} vs device {int(got[r, c])}"
        )
    return 0.0
