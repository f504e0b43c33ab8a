"""What ran on the device, and how."""
from . import _C


def executed_ops():
    """Counts of every op run on `neuron` since start (or the last reset).

    Returns {op name: {path: count}} where path is one of
    "kernel" (a direct neuron registration), "queue" (ATen's CPU kernel on the
    device buffers, queued on the stream, zero-copy), "sync" (the same after a
    stream synchronization, for ops whose output shape depends on the data),
    "chained" (queued like "queue", and joined to the foreach ops queued just
    before it, to run with them as one pass over memory), and "cpu_copy" (the
    last resort: arguments copied to the host and back).
    """
    return _C._executed_ops()


def fallback_ops():
    """Names of the ops that ran through the copy-to-CPU fallback."""
    return sorted(name for name, paths in executed_ops().items() if paths.get("cpu_copy"))


def reset_executed_ops():
    _C._reset_executed_ops()
