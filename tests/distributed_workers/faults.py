"""Faults: a mismatch is reported on every rank and the group keeps working; a rank that
leaves early ends the others' collective with a timeout naming it."""
import os
import sys
import time

import torch
import torch.distributed as dist

from common import check, init, rank_env


def expect_error(fn, *needles):
    """`fn` (or the next synchronization of the current stream, where wait() reports a
    collective that fails after it returned) raises an error holding every needle."""
    try:
        fn()
        torch.neuron.current_stream().synchronize()
    except RuntimeError as e:  # DistBackendError is a RuntimeError
        msg = str(e)
        for n in needles:
            check(n in msg, f"error message {msg!r} lacks {n!r}")
        print(f"rank {os.environ['RANK']}: {type(e).__name__}: {msg.splitlines()[0][:300]}", flush=True)
        return e
    raise AssertionError(f"no error raised, expected one with {needles}")


def main():
    rank, world, _ = rank_env()
    timeout = float(os.environ.get("FAULT_TIMEOUT", "4"))
    dev = init("neuron", timeout_s=timeout)
    # Ranks disagree on the size: every rank learns it.
    t = torch.ones(4 + rank, device=dev)
    e = expect_error(lambda: dist.all_reduce(t), "mismatch", "all_reduce")
    check(isinstance(e, dist.DistBackendError), f"{type(e)} is a DistBackendError")
    # ... and on the op.
    op = dist.ReduceOp.SUM if rank == 0 else dist.ReduceOp.MAX
    expect_error(lambda: dist.all_reduce(torch.ones(3, device=dev), op=op), "mismatch")
    # Bad input on one rank only (bitwise op on floats on rank 0).
    bad = torch.ones(3, device=dev) if rank == 0 else torch.ones(3, dtype=torch.int64, device=dev)
    expect_error(lambda: dist.all_reduce(bad, op=dist.ReduceOp.BAND))
    # A collective that fails after wait() returned (rank 0 does not wait for the late
    # peer): the stream that waited reports it at its next synchronization, as the
    # DistBackendError it is. (async_op=True: a synchronous call on idle streams runs
    # on the caller's thread and raises at once, as the mismatches above did.)
    late = torch.ones(4 + rank, device=dev)
    if rank != 0:
        time.sleep(0.5)
        expect_error(lambda: dist.all_reduce(late), "mismatch")
    else:
        dist.all_reduce(late, async_op=True).wait()  # returns at once
        try:
            torch.neuron.current_stream().synchronize()
        except dist.DistBackendError as e:
            check("mismatch" in str(e) and "all_reduce" in str(e), f"error at the synchronization: {e}")
        else:
            raise AssertionError("the failed all_reduce was not reported at the synchronization")
    # Argument errors c10d passes on are raised at the call and queue nothing.
    expect_error(lambda: dist.all_gather_single(torch.empty(3, device=dev), torch.ones(2, device=dev)),
                 "ProcessGroupNeuron all_gather_into_tensor", "group size (2)")
    expect_error(lambda: dist.all_to_all_single(torch.empty(4, device=dev), torch.ones(4, device=dev),
                                                [1, 3], [3, 3]),
                 "ProcessGroupNeuron all_to_all_single", "add up to 6 rows")
    # isend/irecv of different sizes: both sides name both calls (the long message is
    # still taken off the channel, and its sender learns of the refusal).
    if rank == 0:
        expect_error(lambda: dist.isend(torch.ones(200_000, device=dev), dst=1).wait(), "refused",
                     "expected 100 float32 with tag 0", "sent 200000 float32 with tag 0")
    elif rank == 1:
        expect_error(lambda: dist.irecv(torch.empty(100, device=dev), src=0).wait(), "mismatch",
                     "expected 100 float32 with tag 0", "sent 200000 float32 with tag 0")
    # The group still works.
    u = torch.ones(5, device=dev)
    dist.all_reduce(u)
    check(torch.equal(u.cpu(), torch.full((5,), float(world))), "all_reduce after errors")
    print(f"rank {rank}: mismatches OK", flush=True)
    # Rank world-1 leaves without a word; the others time out naming it.
    if rank == world - 1:
        sys.stdout.flush()
        os._exit(0)
    v = torch.ones(5, device=dev)
    expect_error(lambda: dist.all_reduce(v), "timeout", str(world - 1))
    # The process keeps working (the device; the broken group refuses quickly).
    check(torch.equal((v * 2).cpu(), torch.full((5,), 2.0)), "device usable after the timeout")
    expect_error(lambda: dist.all_reduce(v))
    print(f"rank {rank}: timeout OK", flush=True)
    os._exit(0)  # the group is broken: do not wait for a clean shutdown


if __name__ == "__main__":
    main()
