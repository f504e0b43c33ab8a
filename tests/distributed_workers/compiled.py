"""Collectives in graphs compiled with torch.compile(backend="neuron") (run inside
parallel.py's launch): functional all_reduce / all_gather / reduce_scatter (also coalesced) run as
steps of the compiled program, equal to eager and to CPU references, in issue order
with eager collectives; mismatched calls and a missing rank give errors, not hangs;
a tensor-parallel MLP compiled trains as the eager one."""
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch.testing import assert_close

import torchneuron
from common import check

N = 8


def splits(rank, world):
    """Rows rank `rank` sends to each rank in the all_to_all (uneven; as many as it receives)."""
    return [(rank + j) % 2 + 1 for j in range(world)]


def rank_inputs(r, seed, world):
    g = torch.Generator().manual_seed(seed * 100 + r)
    return (torch.randn(N, generator=g), torch.randn(N, generator=g),
            torch.randn(sum(splits(r, world)), 3, generator=g))


def collectives_fn(group, world, rank):
    def f(x, y, z):
        s = fc.all_reduce(x * 2, "sum", group)
        a = fc.all_reduce(y, "avg", group)
        m = fc.all_reduce(x, "max", group)
        g = fc.all_gather_single(s + 1, 0, group)
        r = fc.reduce_scatter_single(g * y.repeat(world), "sum", 0, group)
        t = fc.all_to_all_single(z * 3, splits(rank, world), splits(rank, world), group)
        b = fc.broadcast(y - 1, world - 1, group)
        # Coalesced: one collective per tensor of the list, in list order.
        cs, cm = fc.all_reduce_coalesced([x + 1, y], "sum", group)
        cg = fc.all_gather_into_tensor_coalesced([x, y * 2], group)
        cr = fc.reduce_scatter_tensor_coalesced([x.repeat(world), y.repeat(world)], "sum", [0, 0], group)
        return s, a, m, g, r.relu(), t, b, cs, cm, cg[0], cg[1], cr[0], cr[1]
    return f


def reference(rank, world, seed):
    xs, ys, zs = zip(*(rank_inputs(r, seed, world) for r in range(world)))
    s = sum(2 * x for x in xs)
    g = (s + 1).repeat(world)
    r = sum(g * y.repeat(world) for y in ys).chunk(world)[rank]
    t = torch.cat([(3 * zs[j]).split(splits(j, world))[rank] for j in range(world)])
    return (s, sum(ys) / world, torch.stack(xs).amax(0), g, r.relu(), t, ys[-1] - 1,
            sum(x + 1 for x in xs), sum(ys), torch.cat(xs), torch.cat([2 * y for y in ys]),
            sum(xs), sum(ys))


def programs(records):
    return [p for rec in records for p in rec["programs"].values()]


def functional_collectives(rank, world, dev):
    group = dist.group.WORLD
    f = collectives_fn(group, world, rank)
    compiled = torch.compile(f, backend="neuron")
    torchneuron.reset_compile_metrics()
    for seed in (1, 2):  # the second call: other values, same shapes, no recompilation
        inputs = [t.to(dev) for t in rank_inputs(rank, seed, world)]
        got = [t.cpu() for t in compiled(*inputs)]
        eager = [t.cpu() for t in f(*inputs)]
        check(len(got) == 13, f"thirteen results, got {len(got)}")
        for what, c, e, ref in zip(("all_reduce sum", "all_reduce avg", "all_reduce max", "all_gather",
                                    "reduce_scatter", "all_to_all", "broadcast", "all_reduce_coalesced 0",
                                    "all_reduce_coalesced 1", "all_gather_coalesced 0",
                                    "all_gather_coalesced 1", "reduce_scatter_coalesced 0",
                                    "reduce_scatter_coalesced 1"), got, eager,
                                   reference(rank, world, seed)):
            check(torch.equal(c, e), f"compiled {what} equals eager: {c} vs {e}")
            assert_close(c, ref, msg=lambda m: f"compiled {what} vs CPU: {m}")
    records = torchneuron.compile_metrics()
    check(len(records) == 1, f"one compilation for two calls, got {len(records)}")
    print(f"rank {rank}: compiled functional collectives: {records[0]['programs']}", flush=True)
    progs = programs(records)
    check([p["executor"] for p in progs] == ["compiler"] and progs[0]["collectives"] == 13,
          f"the thirteen collectives ran in the program: {progs}")
    print(f"rank {rank}: compiled functional collectives OK", flush=True)

    # Program and eager collectives in one order: rank 0 runs the all_reduce in a
    # compiled program and queues an eager all_gather right behind it; rank 1 runs
    # both eagerly. Swapped, they would be a mismatch.
    def reduce_then_scale(t):
        return fc.all_reduce(t, "sum", group) * 3

    t = torch.full((N,), float(rank + 1), device=dev)
    gathered = torch.empty(world * 2, device=dev)
    reduced = (torch.compile(reduce_then_scale, backend="neuron") if rank == 0 else reduce_then_scale)(t)
    dist.all_gather_single(gathered, torch.full((2,), float(rank), device=dev))
    want = 3.0 * sum(range(1, world + 1))
    check(reduced.cpu().eq(want).all().item(), f"compiled all_reduce next to eager: {reduced.cpu()}")
    check(gathered.cpu().tolist() == [float(r) for r in range(world) for _ in range(2)],
          f"eager all_gather after a compiled all_reduce: {gathered.cpu()}")
    # A collective issued eagerly (an AsyncCollectiveTensor) read by a compiled graph:
    # the graph waits for it.
    pending = fc.all_reduce(torch.full((N,), float(rank + 1), device=dev), "sum", group)
    doubled = torch.compile(lambda t: t * 2, backend="neuron")(pending)
    check(doubled.cpu().eq(2 * sum(range(1, world + 1))).all().item(), f"eager collective into a graph: {doubled.cpu()}")
    print(f"rank {rank}: compiled and eager collectives in order OK", flush=True)

    # Ranks that disagree (8 elements here, 16 there) all get neuroncoll's mismatch
    # error from the program, and the group keeps working.
    def total(t):
        return fc.all_reduce(t, "sum", group) + 0
    n = N * (rank + 1)
    try:
        torch.compile(total, backend="neuron")(torch.ones(n, device=dev)).cpu()
        check(False, "mismatched compiled all_reduce raised nothing")
    except RuntimeError as e:
        check(isinstance(e, dist.DistBackendError) and "mismatch" in str(e) and "compiled program step" in str(e), f"mismatch error names it: {e}")
    ok = torch.ones(N, device=dev)
    dist.all_reduce(ok)
    check(ok.cpu().eq(world).all().item(), "group usable after a mismatch")
    print(f"rank {rank}: compiled mismatch OK", flush=True)


def missing_rank(rank, world, dev):
    """A compiled collective whose peer never comes ends at the group's timeout; a
    program that fails before its collective cancels its turn on the group's queue,
    which tells the peers waiting in that collective."""
    short = dist.new_group(backend="neuron", timeout=timedelta(seconds=3))
    other = dist.new_group(backend="neuron", timeout=timedelta(seconds=3))

    def lookup_then_reduce(index, table):
        return fc.all_reduce(torch.nn.functional.embedding(index, table), "sum", other)
    index = torch.tensor([5 if rank == 0 else 1], device=dev)  # out of range on rank 0
    start = time.monotonic()
    try:
        torch.compile(lookup_then_reduce, backend="neuron")(index, torch.ones(4, 2, device=dev)).cpu()
        check(False, "a compiled all_reduce after a failed lookup raised nothing")
    except (IndexError, RuntimeError) as e:
        # Rank 1 hears of rank 0's failure at once (not at the group's timeout of 3 s).
        want = "index out of range" if rank == 0 else "rank 0: its compiled program did not reach its all_reduce"
        check(want in str(e), f"rank {rank}: {want}: {e}")
        took = time.monotonic() - start
        check(rank == 0 or took < 2.0, f"rank 1 heard of rank 0's failure after {took:.1f} s")
    if rank == 0:
        # The failed program cancelled its turn: the group's queue is idle, and the
        # group ends at once instead of waiting for the turn's timeout.
        start = time.monotonic()
        dist.destroy_process_group(other)
        took = time.monotonic() - start
        check(took < 1.5, f"the group's queue was left waiting {took:.1f} s")
    else:
        dist.destroy_process_group(other)
    if rank == 0:
        f = torch.compile(lambda t: fc.all_reduce(t, "sum", short) + 1, backend="neuron")
        try:
            f(torch.ones(N, device=dev)).cpu()
            check(False, "a compiled all_reduce without its peer raised nothing")
        except RuntimeError as e:
            check(isinstance(e, dist.DistBackendError) and "timeout" in str(e) and "waiting for rank(s) 1" in str(e),
                  f"timeout error names the missing rank: {e}")
    dist.barrier(device_ids=[dev.index])
    print(f"rank {rank}: compiled timeout OK", flush=True)


def tensor_parallel(rank, world, mesh, dev, make_model):
    """ColwiseParallel/RowwiseParallel MLP compiled: forward, backward (the input's
    gradient needs an all_reduce) and the gradients equal the eager model's."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    def make():
        m = make_model().to(dev)
        plan = {}
        for i in range(len(m)):
            plan[f"{i}.up"] = ColwiseParallel()
            plan[f"{i}.down"] = RowwiseParallel()
        return parallelize_module(m, mesh, plan)
    eager, comp = make(), make()
    compiled = torch.compile(comp, backend="neuron")
    torchneuron.reset_compile_metrics()
    g = torch.Generator().manual_seed(7)
    for _ in range(2):
        x = torch.randn(4, 16, generator=g).to(dev)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ye, yc = eager(xe), compiled(xc)
        ye.square().sum().backward()
        yc.square().sum().backward()
        assert_close(yc.detach().cpu(), ye.detach().cpu(), msg=lambda m: f"compiled TP output: {m}")
        assert_close(xc.grad.cpu(), xe.grad.cpu(), msg=lambda m: f"compiled TP input gradient: {m}")
        for (name, p), q in zip(eager.named_parameters(), comp.parameters()):
            assert_close(q.grad.full_tensor().cpu(), p.grad.full_tensor().cpu(),
                         msg=lambda m: f"compiled TP gradient of {name}: {m}")
    records = torchneuron.compile_metrics()
    progs = programs(records)
    check(len(records) == 1 and all(p["executor"] == "compiler" for p in progs),
          f"one compilation, every graph a program: {progs}")
    forward, backward = records[0]["programs"]["forward"], records[0]["programs"]["backward"]
    check(forward["collectives"] >= 1 and backward["collectives"] >= 1,
          f"collectives ran inside the forward and backward programs: {progs}")
    print(f"rank {rank}: compiled tensor parallel OK", flush=True)


if __name__ == "__main__":  # on its own: the functional collectives (with NEURON_LAUNCH_BLOCKING=1)
    from common import init, rank_env

    rank, world, _ = rank_env()
    device = init("device_id")
    functional_collectives(rank, world, device)
    dist.destroy_process_group()
