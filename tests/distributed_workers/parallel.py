"""FSDP2 (fully_shard), DTensor tensor parallelism (ColwiseParallel / RowwiseParallel) and
sequence parallelism on neuron (on MLP blocks, and tensor + sequence parallelism on a
Llama-style decoder, llama_style.py): parameters after a few optimizer steps equal a
single-device run on the same global batch. The group comes from
init_device_mesh("neuron", ...). Then collectives in torch.compile'd graphs
(compiled.py), in the same launch."""
import copy

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.testing import assert_close

from common import check, rank_env


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(MLP(), MLP())


def data(steps, n):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(n, 16, generator=g), torch.randn(n, 16, generator=g)) for _ in range(steps)]


def train(model, batches, shard, dev):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for x, y in batches:
        xs, ys = shard(x), shard(y)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xs.to(dev)), ys.to(dev)).backward()
        opt.step()


def single_device(batches):
    m = make_model()
    train(m, batches, lambda t: t, torch.device("cpu"))
    return m


class NormBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))


def sequence_parallel(rank, world, mesh, dev):
    """LayerNorm on sequence shards, then column/row-parallel linears."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    def make():
        torch.manual_seed(0)
        return NormBlock()
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(2, 4 * world, 16, generator=g), torch.randn(2, 4 * world, 16, generator=g))
               for _ in range(3)]
    ref = make()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        opt.step()
    sp = make().to(dev)
    parallelize_module(sp, mesh, {"norm": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)),
                                  "down": RowwiseParallel(output_layouts=Shard(1))})
    opt = torch.optim.SGD(sp.parameters(), lr=0.1)
    for x, y in batches:
        xs, ys = x.chunk(world, dim=1)[rank].to(dev), y.chunk(world, dim=1)[rank].to(dev)
        opt.zero_grad()
        # Each rank's loss is the mean over its 1/world of the sequence.
        (torch.nn.functional.mse_loss(sp(xs), ys) / world).backward()
        opt.step()
    for (name, p), q in zip(sp.named_parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                     msg=lambda m: f"sequence parallel {name}: {m}")
    print(f"rank {rank}: sequence parallel OK", flush=True)


def main():
    rank, world, local_rank = rank_env()
    mesh = init_device_mesh("neuron", (world,))
    dev = torch.device("neuron", local_rank)
    steps, per_rank = 3, 4
    batches = data(steps, per_rank * world)
    ref = single_device(batches)

    # FSDP2: each rank its slice of the batch; gradients reduce-scattered (AVG).
    from torch.distributed.fsdp import fully_shard
    model = make_model().to(dev)
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train(model, batches, lambda t: t[rank * per_rank:(rank + 1) * per_rank], dev)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                     msg=lambda m: f"fully_shard {name}: {m}")
    print(f"rank {rank}: fsdp2 OK", flush=True)

    # FSDP2 with bfloat16 parameters and float32 gradient reduction: the bfloat16
    # all-gathers and float32 reduce-scatters run; the result follows the float32
    # run within bfloat16 rounding.
    from torch.distributed.fsdp import MixedPrecisionPolicy
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    mp = make_model().to(dev)
    for block in mp:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(mp, mesh=mesh, mp_policy=policy)
    train(mp, batches, lambda t: t[rank * per_rank:(rank + 1) * per_rank], dev)
    for (name, p), q in zip(mp.named_parameters(), ref.parameters()):
        check(p.dtype == torch.float32, f"{name} keeps float32 master weights")
        assert_close(p.full_tensor().detach().cpu(), q.detach(), rtol=0.05, atol=0.02,
                     msg=lambda m: f"fully_shard bf16 {name}: {m}")
    print(f"rank {rank}: fsdp2 mixed precision OK", flush=True)

    # Tensor parallel: the same global batch on every rank, weights split.
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    tp = make_model().to(dev)
    plan = {}
    for i in range(len(tp)):
        plan[f"{i}.up"] = ColwiseParallel()
        plan[f"{i}.down"] = RowwiseParallel()
    parallelize_module(tp, mesh, plan)
    train(tp, batches, lambda t: t, dev)
    for (name, p), q in zip(tp.named_parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                     msg=lambda m: f"tensor parallel {name}: {m}")
    print(f"rank {rank}: tensor parallel OK", flush=True)
    sequence_parallel(rank, world, mesh, dev)
    import llama_style
    llama_style.sequence_parallel(rank, mesh, dev)
    llama_style.compiled_sequence_parallel(rank, mesh, dev)
    llama_style.compiled_fsdp2(rank, mesh, dev)

    # The same launch runs the collectives of compiled graphs (compiled.py).
    import compiled
    compiled.functional_collectives(rank, world, dev)
    compiled.tensor_parallel(rank, world, mesh, dev, make_model)
    compiled.missing_rank(rank, world, dev)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
