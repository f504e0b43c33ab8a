"""Ranks on several hosts (torchrun nodes on loopback told apart by TORCHNEURON_DIST_HOST_ID,
or in separate network namespaces): the group sees the hosts, collectives equal CPU
references over the hierarchical path (shared memory inside a host, gloo between hosts),
and faults across hosts are errors naming ranks, never hangs.
Usage: multi_host.py full|quick HOSTS."""
import os
import sys

import torch
import torch.distributed as dist

from collectives import (all_reduce_every_op, all_to_all_uneven, data_movement, make, ordering_async_and_hooks,
                         point_to_point, point_to_point_one_by_one, same)
from common import check, init, rank_env
from faults import expect_error


def quick(rank, world, dev):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        for op in ("SUM", "AVG", "MAX") if dtype != torch.bool else ("SUM", "MIN"):
            if op == "AVG" and dtype == torch.bool:
                continue
            t = (make(rank, 1001, dtype) if dtype != torch.bool else torch.arange(1001) % (rank + 2) == 0).to(dev)
            ref = torch.stack([make(r, 1001, dtype) if dtype != torch.bool else torch.arange(1001) % (r + 2) == 0
                               for r in range(world)])
            dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
            if dtype == torch.bool:
                ref = ref.any(0) if op == "SUM" else ref.all(0)
            elif op == "SUM":
                ref = ref.double().sum(0).to(dtype)
            elif op == "AVG":
                ref = (ref.double().sum(0) / world if dtype.is_floating_point
                       else torch.div(ref.sum(0), world, rounding_mode="trunc")).to(dtype)
            else:
                ref = ref.max(0).values
            same(t, ref, f"all_reduce {op} {dtype}")
    outs = [torch.empty(7, device=dev) for _ in range(world)]
    dist.all_gather(outs, torch.full((7,), float(rank), device=dev))
    for r in range(world):
        same(outs[r], torch.full((7,), float(r)), f"all_gather block {r}")
    t = torch.full((5,), float(rank), device=dev)
    dist.broadcast(t, src=world - 1)
    same(t, torch.full((5,), float(world - 1)), "broadcast")
    point_to_point(rank, world, dev)


def faults(rank, world, dev):
    last = world - 1
    # Ranks of different hosts disagree on the size: every rank learns it.
    t = torch.ones(4 + (rank == 0), device=dev)
    expect_error(lambda: dist.all_reduce(t), "mismatch", "rank 0: all_reduce float32 SUM count 5",
                 f"rank {last}: all_reduce float32 SUM count 4")
    # A receive across hosts that expects another size names both.
    if rank == 0:
        dist.send(torch.ones(5, device=dev), dst=last)
    elif rank == last:
        expect_error(lambda: dist.recv(torch.empty(6, device=dev), src=0), "mismatch",
                     "expected 6 float32", "sent 5 float32")
    u = torch.ones(3, device=dev)
    dist.all_reduce(u)
    same(u, torch.full((3,), float(world)), "all_reduce after the errors")
    print(f"rank {rank}: multi-host mismatches OK", flush=True)
    # The last rank (on the last host) leaves; the others fail naming it, at once
    # (its connections close) or at the timeout.
    if rank == last:
        sys.stdout.flush()
        os._exit(0)
    expect_error(lambda: dist.all_reduce(torch.ones(3, device=dev)), f"rank(s) {last}")
    expect_error(lambda: dist.all_reduce(torch.ones(3, device=dev)), "aborted")
    print(f"rank {rank}: multi-host dead peer OK", flush=True)
    os._exit(0)  # the group is broken: do not wait for a clean shutdown


def main():
    mode, hosts = sys.argv[1], int(sys.argv[2])
    rank, world, _ = rank_env()
    dev = init("neuron", timeout_s=float(os.environ.get("FAULT_TIMEOUT", "30")))
    pg = dist.distributed_c10d._get_default_group()._get_backend(dev)
    check(len(pg._hosts()) == hosts, f"{hosts} hosts, got {pg._hosts()}")
    if mode == "full":
        all_reduce_every_op(rank, world, dev)
        data_movement(rank, world, dev)
        all_to_all_uneven(rank, world, dev)
        point_to_point(rank, world, dev)
        point_to_point_one_by_one(rank, world, dev)  # the ring crosses hosts
        ordering_async_and_hooks(rank, world, dev)
        # Collectives inside compiled programs take the hierarchical path too.
        import compiled
        compiled.functional_collectives(rank, world, dev)
    else:
        quick(rank, world, dev)
    print(f"rank {rank}: multi-host collectives OK", flush=True)
    faults(rank, world, dev)


if __name__ == "__main__":
    main()
