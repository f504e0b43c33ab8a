"""DDP on neuron: after a few SGD steps every rank's parameters equal those of a
single-device run on the same global batch (computed here on CPU from the same seed)."""
import copy
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.testing import assert_close

from common import check, init, rank_env


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def batches(steps, per_rank, world):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(per_rank * world, 16, generator=g), torch.randn(per_rank * world, 4, generator=g))
            for _ in range(steps)]


def host_memory_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


def check_memory_cap(dev):
    # Launched with TORCHNEURON_DEVICE_MEMORY=1TiB: every core of every local
    # process together stays within the host's memory.
    props = torch.neuron.get_device_properties(dev)
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    total = props.total_memory * torch.neuron.device_count() * local
    check(props.memory_capped and total <= host_memory_bytes(),
          f"cap {props.total_memory} x {torch.neuron.device_count()} cores x {local} processes "
          f"exceeds the host's {host_memory_bytes()} bytes")


def main():
    rank, world, _ = rank_env()
    dev = init("neuron")
    check_memory_cap(dev)
    steps, per_rank = 4, 6
    data = batches(steps, per_rank, world)

    reference = model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for x, y in data:
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()

    # bucket_cap_mb small: several buckets, so gradients are reduced during backward.
    ddp = DDP(copy.deepcopy(model()).to(dev), bucket_cap_mb=0.001)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for x, y in data:
        xs, ys = x[rank * per_rank:(rank + 1) * per_rank], y[rank * per_rank:(rank + 1) * per_rank]
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(xs.to(dev)), ys.to(dev)).backward()
        opt.step()
    for (name, p), q in zip(ddp.module.named_parameters(), reference.parameters()):
        assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")

    # A comm hook chains on the work's future (fp16 compression hook).
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    ddp2 = DDP(model().to(dev))
    ddp2.register_comm_hook(None, default_hooks.fp16_compress_hook)
    x = torch.randn(world * per_rank, 16, generator=torch.Generator().manual_seed(2))
    ddp2(x[rank * per_rank:(rank + 1) * per_rank].to(dev)).sum().backward()
    ref2 = model()
    ref2(x).sum().backward()
    for p, q in zip(ddp2.module.parameters(), ref2.parameters()):
        # mean of the ranks' gradients = the full batch's gradient / world
        assert_close(p.grad.cpu(), q.grad / world, rtol=2e-3, atol=2e-3)
    dist.destroy_process_group()
    print(f"rank {rank}: ddp OK", flush=True)


if __name__ == "__main__":
    main()
