"""Every collective of the neuron backend against a reference computed on CPU from the
inputs every rank can rebuild (seeded by rank). Usage: collectives.py INIT_MODE."""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.testing import assert_close

from common import check, init, rank_env

SIZES = (0, 1, 1001, 300_000)  # 300k float32: above the staging buffer (chunked path)
FLOAT_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM")
INT_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


def make(rank, n, dtype, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + 7 * n + salt)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float32) + 0.5).to(dtype)
    return torch.randint(1, 4 if n > 1000 else 100, (n,), generator=g, dtype=dtype)


def reduce_ref(xs, op, dtype, world):
    if dtype.is_floating_point:
        acc = [x.double() for x in xs]
        if op == "PREMUL_SUM":
            acc = [x * (r + 1) for r, x in enumerate(acc)]
    else:
        acc = list(xs)
    out = acc[0].clone()
    for x in acc[1:]:
        if op in ("SUM", "AVG", "PREMUL_SUM"):
            out = out + x
        elif op == "PRODUCT":
            out = out * x
        elif op == "MIN":
            out = torch.minimum(out, x)
        elif op == "MAX":
            out = torch.maximum(out, x)
        elif op == "BAND":
            out = out & x
        elif op == "BOR":
            out = out | x
        elif op == "BXOR":
            out = out ^ x
    if op == "AVG":
        out = out / world if dtype.is_floating_point else torch.div(out, world, rounding_mode="trunc")
    return out.to(dtype)


def redop(op, rank):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(float(rank + 1))
    return getattr(dist.ReduceOp, op)


def same(actual, expected, what):
    try:
        if expected.dtype.is_floating_point:
            assert_close(actual.cpu(), expected, rtol=1e-5 if expected.dtype == torch.float32 else None,
                         atol=1e-5 if expected.dtype == torch.float32 else None)
        else:
            check(torch.equal(actual.cpu(), expected), what)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def all_reduce_every_op(rank, world, dev):
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for op in (FLOAT_OPS if dtype.is_floating_point else INT_OPS):
            for n in SIZES:
                t = make(rank, n, dtype).to(dev)
                dist.all_reduce(t, op=redop(op, rank))
                ref = reduce_ref([make(r, n, dtype) for r in range(world)], op, dtype, world)
                same(t, ref, f"all_reduce {op} {dtype} n={n}")


def data_movement(rank, world, dev):
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for n in SIZES:
            inputs = [make(r, n, dtype) for r in range(world)]
            root = world - 1
            t = inputs[rank].to(dev)
            dist.broadcast(t, src=root)
            same(t, inputs[root], f"broadcast {dtype} n={n}")

            t = inputs[rank].to(dev)
            dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
            expect = reduce_ref(inputs, "MAX", dtype, world) if rank == root else inputs[rank]
            same(t, expect, f"reduce MAX {dtype} n={n}")

            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)]
            dist.all_gather(outs, inputs[rank].to(dev))
            for r in range(world):
                same(outs[r], inputs[r], f"all_gather {dtype} n={n} block {r}")

            flat = torch.empty(n * world, dtype=dtype, device=dev)
            dist.all_gather_single(flat, inputs[rank].to(dev))
            same(flat, torch.cat(inputs), f"all_gather_single {dtype} n={n}")

            # reduce_scatter: rank r's input is world blocks of n elements.
            big = [make(r, n * world, dtype, salt=1) for r in range(world)]
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_single(out, big[rank].to(dev), op=dist.ReduceOp.SUM)
            ref = reduce_ref(big, "SUM", dtype, world)[rank * n:(rank + 1) * n]
            same(out, ref, f"reduce_scatter_single {dtype} n={n}")
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter(out, list(big[rank].to(dev).chunk(world)) if n else
                                [torch.empty(0, dtype=dtype, device=dev) for _ in range(world)],
                                op=dist.ReduceOp.MAX)
            ref = reduce_ref(big, "MAX", dtype, world)[rank * n:(rank + 1) * n]
            same(out, ref, f"reduce_scatter MAX {dtype} n={n}")

            gathered = [torch.empty(n, dtype=dtype, device=dev) for _ in range(world)] if rank == 0 else None
            dist.gather(inputs[rank].to(dev), gathered, dst=0)
            if rank == 0:
                for r in range(world):
                    same(gathered[r], inputs[r], f"gather {dtype} n={n} block {r}")

            out = torch.empty(n, dtype=dtype, device=dev)
            pieces = [make(world + r, n, dtype) for r in range(world)]
            dist.scatter(out, [p.to(dev) for p in pieces] if rank == root else None, src=root)
            same(out, pieces[rank], f"scatter {dtype} n={n}")


def all_to_all_uneven(rank, world, dev):
    # Rank s sends (s + d + 1) rows of 3 to rank d.
    def block(s, d):
        return torch.full((s + d + 1, 3), float(100 * s + d))
    send = torch.cat([block(rank, d) for d in range(world)]).to(dev)
    in_splits = [rank + d + 1 for d in range(world)]
    out_splits = [s + rank + 1 for s in range(world)]
    out = torch.empty(sum(out_splits), 3, device=dev)
    dist.all_to_all_single(out, send, out_splits, in_splits)
    same(out, torch.cat([block(s, rank) for s in range(world)]), "all_to_all_single uneven")
    outs = [torch.empty(s + rank + 1, 3, device=dev) for s in range(world)]
    dist.all_to_all(outs, [block(rank, d).to(dev) for d in range(world)])
    for s in range(world):
        same(outs[s], block(s, rank), f"all_to_all from {s}")
    even = torch.arange(world * 4, dtype=torch.int64).add(1000 * rank).to(dev)
    out = torch.empty_like(even)
    dist.all_to_all_single(out, even)
    ref = torch.cat([torch.arange(world * 4, dtype=torch.int64).add(1000 * s)[rank * 4:(rank + 1) * 4]
                     for s in range(world)])
    same(out, ref, "all_to_all_single even")


def point_to_point(rank, world, dev):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    # A ring and its reverse in one batch, up to messages far above a channel's 64 KiB:
    # the batch runs as one task, in pieces, so no send waits behind a receive.
    for n in (0, 1, 1001, 200_000):
        got, back = torch.empty(n, device=dev), torch.empty(n, dtype=torch.bfloat16, device=dev)
        ops = [dist.P2POp(dist.isend, make(rank, n, torch.float32, salt=5).to(dev), nxt),
               dist.P2POp(dist.isend, make(rank, n, torch.bfloat16, salt=6).to(dev), prv),
               dist.P2POp(dist.irecv, got, prv),
               dist.P2POp(dist.irecv, back, nxt)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(got, make(prv, n, torch.float32, salt=5), f"batch_isend_irecv ring n={n}")
        same(back, make(nxt, n, torch.bfloat16, salt=6), f"batch_isend_irecv reverse ring n={n}")
    if rank == 0:
        dist.send(torch.arange(200_000, dtype=torch.float32, device=dev), dst=1)
    elif rank == 1:
        got = torch.empty(200_000, device=dev)
        dist.recv(got, src=0)
        same(got, torch.arange(200_000, dtype=torch.float32), "send/recv long message")


def point_to_point_one_by_one(rank, world, dev):
    # isend/irecv issued one by one, every rank sending first, far above a channel's
    # 64 KiB: both ways between the pair at 2 ranks, around a ring at 3. Posted messages
    # do not hold the group's queue; a short timeout makes a deadlock fail fast.
    pg = dist.new_group(list(range(world)), timeout=timedelta(seconds=30))
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for dtype in (torch.float32, torch.bfloat16):
        size = torch.empty(0, dtype=dtype).element_size()
        for nbytes in (4, (64 << 10) + size, 1 << 20, 8 << 20):
            n = nbytes // size
            got = torch.empty(n, dtype=dtype, device=dev)
            reqs = [dist.isend(make(rank, n, dtype, salt=8).to(dev), nxt, group=pg),
                    dist.irecv(got, prv, group=pg)]
            for r in reqs:
                r.wait()
            check(torch.equal(got.cpu(), make(prv, n, dtype, salt=8)),
                  f"isend/irecv one by one {dtype} {nbytes} B: not what rank {prv} sent")
    # Messages and collectives of a group keep their order: an all_reduce issued before
    # waiting for a receive reduces what was received; a send issued after an
    # all_reduce sends its result.
    n = (1 << 20) // 4
    got = torch.empty(n, device=dev)
    reqs = [dist.isend(make(rank, n, torch.float32, salt=9).to(dev), nxt, group=pg),
            dist.irecv(got, prv, group=pg)]
    dist.all_reduce(got, group=pg)
    for r in reqs:
        r.wait()
    total = sum(make(r, n, torch.float32, salt=9).double() for r in range(world))
    same(got, total.float(), "all_reduce after an irecv")
    t = torch.full((n,), float(rank + 1), device=dev)
    work = dist.all_reduce(t, group=pg, async_op=True)
    back = torch.empty(n, device=dev)
    reqs = [dist.isend(t, nxt, group=pg), dist.irecv(back, prv, group=pg)]
    work.wait()
    for r in reqs:
        r.wait()
    same(back, torch.full((n,), float(sum(range(1, world + 1)))), "isend after an all_reduce")


def wait_does_not_block_the_host(rank, world, dev):
    # Rank 0's wait() returns while the collective still waits for a late peer; ops it
    # issues afterwards on its stream still see the result (as with CUDA and NCCL).
    t = torch.full((1000,), float(rank + 1), device=dev)
    if rank != 0:
        time.sleep(1.0)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    returned = time.monotonic() - start
    after = (t * 2).cpu()
    if rank == 0:
        check(returned < 0.5, f"wait() blocked the host for {returned:.2f} s")
    same(after, torch.full((1000,), 2.0 * sum(range(1, world + 1))), "result after a non-blocking wait")
    same(work.get_future().wait()[0], torch.full((1000,), float(sum(range(1, world + 1)))),
         "the future holds the output")


def ordering_async_and_hooks(rank, world, dev):
    # The collective sees values queued just before it, later ops its result.
    base = torch.full((4096,), float(rank + 1), device=dev)
    t = base * 3
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    work.wait()
    after = t + 1
    total = 3.0 * sum(range(1, world + 1))
    same(after, torch.full((4096,), total + 1), "ordering with the current stream")
    same(fut.wait(), torch.full((4096,), 2 * total), "future completes with the output")
    # Collectives issued from another stream keep the group's order.
    side = torch.neuron.Stream()
    with torch.neuron.stream(side):
        u = torch.ones(1000, device=dev) * (rank + 1)
        dist.all_reduce(u)
    torch.neuron.current_stream().wait_stream(side)
    same(u, torch.full((1000,), float(sum(range(1, world + 1)))), "collective on a side stream")
    # Non-contiguous tensors are staged.
    m = (torch.arange(12.0).reshape(3, 4) + rank).to(dev).t()
    dist.all_reduce(m)
    ref = sum(torch.arange(12.0).reshape(3, 4) + r for r in range(world)).t()
    same(m, ref, "all_reduce of a transposed tensor")
    outs = [torch.empty(4, 3, device=dev).t() for _ in range(world)]
    dist.all_gather(outs, (torch.arange(12.0).reshape(3, 4) * (rank + 1)).to(dev))
    for r in range(world):
        same(outs[r], torch.arange(12.0).reshape(3, 4) * (r + 1), f"all_gather into transposed outputs {r}")
    # PREMUL_SUM with a neuron tensor factor, read after the work queued before it.
    factor = torch.zeros((), device=dev) + (rank + 1)
    p = torch.ones(6, device=dev)
    dist.all_reduce(p, op=dist._make_nccl_premul_sum(factor))
    same(p, torch.full((6,), float(sum(range(1, world + 1)))), "PREMUL_SUM with a tensor factor")
    # Coalesced all_reduce (c10d's fast path) and object collectives.
    a, b = torch.ones(5, device=dev) * rank, torch.ones(7, dtype=torch.int64, device=dev)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    same(a, torch.full((5,), float(sum(range(world)))), "coalesced all_reduce a")
    same(b, torch.full((7,), world, dtype=torch.int64), "coalesced all_reduce b")
    ins = [torch.full((3,), float(rank), device=dev), torch.full((5,), float(10 + rank), device=dev)]
    outs = [torch.empty(3 * world, device=dev), torch.empty(5 * world, device=dev)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_single(o, i)
    cm.wait()
    same(outs[0], torch.arange(world).float().repeat_interleave(3), "coalesced all_gather_single 0")
    same(outs[1], (10 + torch.arange(world).float()).repeat_interleave(5), "coalesced all_gather_single 1")
    red = [torch.empty(2, device=dev), torch.empty(4, device=dev)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o in red:
            dist.reduce_scatter_single(o, torch.arange(o.numel() * world, dtype=torch.float32, device=dev) + rank,
                                       op=dist.ReduceOp.AVG)
    cm.wait()
    for o in red:
        full = sum(torch.arange(o.numel() * world, dtype=torch.float32) + r for r in range(world)) / world
        same(o, full[rank * o.numel():(rank + 1) * o.numel()], f"coalesced reduce_scatter_single AVG {o.numel()}")
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank})
    check(objs == [{"rank": r} for r in range(world)], f"all_gather_object {objs}")
    box = [f"from {rank}"]
    dist.broadcast_object_list(box, src=world - 1)
    check(box == [f"from {world - 1}"], f"broadcast_object_list {box}")
    dist.barrier()


def inline_ordering(rank, world, dev):
    # A collective whose caller waits at once (async_op=False) runs on the caller's
    # thread when the caller's stream and the group's queue are idle; otherwise it is
    # queued. Either way it sees what the stream queued before it, and the group's
    # collectives keep one order on every rank (a rank may run a collective inline
    # while another queues it: the sizes differ per step, so a reordering would fail
    # with a mismatch). Bounded: every wait has the group's 60 s timeout.
    backend = dist.distributed_c10d._get_default_group()._get_backend(dev)
    before = backend._stats()["inline_collectives"]
    total = float(sum(range(1, world + 1)))
    # An eager op queued right before an all_reduce of its output (stream busy: the
    # all_reduce is queued behind it), then on an idle stream (inline).
    big = torch.full((256, 256), 1.0 / 256, device=dev)
    for _ in range(3):
        x = torch.full((256,), float(rank + 1), device=dev)
        for _ in range(20):
            x = big @ x
        dist.all_reduce(x)
        same(x, torch.full((256,), total), "all_reduce of an op's output queued just before")
        torch.neuron.synchronize()
        y = torch.full((7,), float(rank + 1), device=dev)
        torch.neuron.synchronize()
        dist.all_reduce(y)
        same(y * 2, torch.full((7,), 2 * total), "all_reduce on an idle stream, then an op on its result")
    # Many small collectives interleaved with device ops on two streams, some issued
    # async, some after a host synchronization, rank 0 sometimes late.
    side = torch.neuron.Stream()
    pending = []
    for i in range(60):
        n = 1 + i % 9
        stream = side if i % 2 else torch.neuron.current_stream()
        with torch.neuron.stream(stream):
            v = torch.full((n,), float(rank + 1), device=dev) * (i + 1)
            if i % 5 == 0:
                stream.synchronize()
            if rank == 0 and i % 7 == 0:
                time.sleep(0.002)
            if i % 6 == 3:  # a host wait, which may run the collective on this thread
                dist.all_reduce(v, async_op=True).wait(timedelta(seconds=600))
                v.add_(0.5)
                pending.append((None, v, i, n, stream))
            elif i % 3 == 0:
                pending.append((dist.all_reduce(v, async_op=True), v, i, n, stream))
            else:
                dist.all_reduce(v)
                v.add_(0.5)  # ordered after the collective
                pending.append((None, v, i, n, stream))
    for work, v, i, n, stream in pending:
        if work is not None:
            with torch.neuron.stream(stream):
                work.wait()
                v.add_(0.5)
        torch.neuron.current_stream().wait_stream(stream)
        same(v, torch.full((n,), total * (i + 1) + 0.5), f"interleaved collective {i}")
    # A host wait shorter than the group's timeout gives up while the collective waits
    # for a late peer (it is not run on the waiting thread), and a later wait ends it.
    late = torch.full((5,), float(rank + 1), device=dev)
    torch.neuron.synchronize()
    if rank == 0:
        work = dist.all_reduce(late, async_op=True)
        try:
            work.wait(timedelta(milliseconds=200))
        except RuntimeError as e:
            check("timed out" in str(e), f"short wait: {e}")
        else:
            raise AssertionError("a 200 ms wait for a peer 1 s late did not time out")
        work.wait(timedelta(seconds=600))
    else:
        time.sleep(1.0)
        dist.all_reduce(late)
    same(late, torch.full((5,), total), "all_reduce after a short host wait")
    # A collective right after point-to-point messages reduces what was received.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    for n in (3, 200_000):
        got = torch.empty(n, device=dev)
        sent = torch.full((n,), float(rank + 1), device=dev)
        torch.neuron.synchronize()
        reqs = [dist.isend(sent, nxt), dist.irecv(got, prv)]
        torch.neuron.synchronize()
        dist.all_reduce(got)
        for r in reqs:
            r.wait()
        same(got, torch.full((n,), total), f"all_reduce right after isend/irecv of {n}")
    ran = backend._stats()["inline_collectives"] - before
    if os.environ.get("TORCHNEURON_DIST_INLINE") == "0":
        check(ran == 0, f"{ran} collectives ran inline with TORCHNEURON_DIST_INLINE=0")
    else:
        check(ran > 0, "no collective ran on the caller's thread")


def main():
    mode = sys.argv[1]
    rank, world, local_rank = rank_env()
    dev = init(mode)
    check(torch.neuron.current_device() == local_rank,
          f"threads start on the local rank's core: {torch.neuron.current_device()}")
    check("neuron" in str(dist.get_backend()), f"backend {dist.get_backend()}")
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    check(torch.neuron.device_count() == max(2, local_world), f"{torch.neuron.device_count()} cores")
    all_reduce_every_op(rank, world, dev)
    stats = dist.distributed_c10d._get_default_group()._get_backend(dev)._stats()
    if local_world == world:  # on several hosts a host's ranks reduce to one of them instead
        # Large all_reduces read peers' buffers directly when device memory is shared
        # (TORCHNEURON_DIST_SHARED_MEMORY=1; by default where shared memory has huge pages).
        direct = stats["direct_all_reduces"]
        shared = os.environ.get("TORCHNEURON_DIST_SHARED_MEMORY") == "1"
        large = direct if shared else direct + stats["chunked_all_reduces"]
        check(stats["small_all_reduces"] > 0 and large > 0,
              f"both all_reduce paths ran: {stats}")
    data_movement(rank, world, dev)
    if os.environ.get("TORCHNEURON_DIST_SHARED_MEMORY") == "1":
        stats = dist.distributed_c10d._get_default_group()._get_backend(dev)._stats()
        check(stats["direct_broadcasts"] > 0 and stats["direct_all_gathers"] > 0
              and stats["direct_reduce_scatters"] > 0,
              f"broadcast, all_gather and reduce_scatter read peers' device memory: {stats}")
    all_to_all_uneven(rank, world, dev)
    point_to_point(rank, world, dev)
    point_to_point_one_by_one(rank, world, dev)
    ordering_async_and_hooks(rank, world, dev)
    wait_does_not_block_the_host(rank, world, dev)
    inline_ordering(rank, world, dev)
    if mode == "mixed":  # CPU tensors go to gloo in the same group
        c = torch.ones(3) * rank
        dist.all_reduce(c)
        same(c, torch.full((3,), float(sum(range(world)))), "gloo half of a mixed group")
    # A subgroup of the first and last ranks (its own neuroncoll group and queue).
    members = [0, world - 1]
    sub = dist.new_group(members)
    if rank in members:
        t = torch.full((5,), float(rank), device=dev)
        dist.all_reduce(t, group=sub)
        same(t, torch.full((5,), float(sum(members))), "all_reduce over new_group([0, last])")
        dist.barrier(group=sub)
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("neuron", (world,))
    t = torch.ones(8, device=dev)
    dist.all_reduce(t, group=mesh.get_group())
    same(t, torch.full((8,), float(world)), "all_reduce over init_device_mesh's group")
    dist.destroy_process_group()
    print(f"rank {rank}: collectives OK", flush=True)


if __name__ == "__main__":
    main()
