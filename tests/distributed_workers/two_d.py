"""2-D parallelism on a (2, 2) mesh: tensor parallelism (ColwiseParallel / RowwiseParallel)
along "tp", FSDP2 along "dp", on an MLP and (with sequence parallelism) on a Llama-style
decoder (llama_style.py); parameters after a few optimizer steps equal one device."""
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.testing import assert_close


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))

def main():
    rank = int(os.environ["RANK"])
    mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    dev = torch.device("neuron", int(os.environ["LOCAL_RANK"]))
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)) for _ in range(3)]
    ref = make()
    opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        opt.step()
    model = make().to(dev)
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    dp = mesh["dp"].get_local_rank()  # the data-parallel slice of the batch
    for x, y in batches:
        opt.zero_grad()
        xs, ys = x[dp * 4:(dp + 1) * 4], y[dp * 4:(dp + 1) * 4]
        torch.nn.functional.mse_loss(model(xs.to(dev)), ys.to(dev)).backward()
        opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                     msg=lambda m: f"2-D {name}: {m}")
    print(f"rank {rank}: 2-D OK", flush=True)
    import llama_style
    llama_style.two_dimensional(rank, mesh, dev)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
