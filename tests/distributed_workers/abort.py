"""abort() and destroy_process_group(): a rank waiting in a collective that its peer
never joins is released by another thread's abort() at once, with an error saying so
(long before the group's timeout); destroy_process_group() from another thread first
lets the pending collective run, as NCCL's shutdown does, so the waiter gets the
group's timeout error after that timeout, not a hang; the ended group refuses further
collectives; a collective issued just before the rank destroys its group completes
for the peer that waits for it; a group made again on the same store works; a clean
destroy at the end leaves nothing."""
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from common import check, rank_env
from faults import expect_error

GROUP_TIMEOUT_S = 60  # abort's release must come long before it
DESTROY_TIMEOUT_S = 4  # destroy lets the stuck collective run out this timeout


def end_group(how):
    if how == "abort":
        dist.distributed_c10d._abort_process_group()
    else:
        dist.destroy_process_group()


def stuck_collective_released(how, rank, world, dev, store):
    timeout_s = GROUP_TIMEOUT_S if how == "abort" else DESTROY_TIMEOUT_S
    dist.init_process_group("neuron", timeout=timedelta(seconds=timeout_s))
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    check(torch.equal(t.cpu(), torch.full((3,), float(world))), f"{how}: the group works first")
    pg = dist.group.WORLD
    if rank == 0:
        work = dist.all_reduce(torch.ones(1000, device=dev), async_op=True)  # rank 1 never joins
        ender = threading.Timer(0.5, end_group, args=(how,))
        start = time.monotonic()
        ender.start()
        expect_error(work.wait, "aborted while waiting for rank(s) 1" if how == "abort"
                     else f"timed out after {timeout_s * 1000} ms waiting for rank(s) 1")
        took = time.monotonic() - start
        ender.join()
        check(took < 10, f"{how} released the collective after {took:.1f} s")
        if how == "destroy":
            check(took > timeout_s - 1, f"destroy ended the pending collective after {took:.1f} s, "
                                        f"before the group's timeout of {timeout_s} s")
        store.set(f"{how}/released", "1")
    else:
        store.wait([f"{how}/released"])
        end_group(how)
    word = "aborted" if how == "abort" else "destroyed"
    expect_error(lambda: pg.allreduce([torch.ones(2, device=dev)]).wait(), f"the process group was {word}")
    print(f"rank {rank}: {how} releases a stuck collective OK", flush=True)


def main():
    rank, world, local_rank = rank_env()
    dev = torch.device("neuron", local_rank)
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                          is_master=False, timeout=timedelta(seconds=60))
    for how in ("abort", "destroy"):
        stuck_collective_released(how, rank, world, dev, store)
    # A group made again on the same store works, and ends cleanly.
    dist.init_process_group("neuron", timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    t = torch.full((5,), float(rank), device=dev)
    dist.all_reduce(t)
    check(torch.equal(t.cpu(), torch.full((5,), float(sum(range(world))))), "all_reduce after re-init")
    dist.barrier()
    # The last collective of a script, issued right before the group ends: rank 1
    # destroys its group while its part may still be queued; rank 0 gets the data.
    gathered = [torch.empty(4, device=dev) for _ in range(world)]
    dist.all_gather(gathered, torch.full((4,), float(rank + 1), device=dev))
    if rank == 0:
        time.sleep(0.5)
        check(all(torch.equal(g.cpu(), torch.full((4,), float(r + 1))) for r, g in enumerate(gathered)),
              "all_gather issued right before the peer's destroy_process_group")
    dist.destroy_process_group()
    print(f"rank {rank}: re-init after abort and destroy OK", flush=True)


if __name__ == "__main__":
    main()
