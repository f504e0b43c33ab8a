"""A small Llama-style decoder (RMSNorm, rotary attention with grouped KV heads, SwiGLU,
untied output) and the tensor + sequence parallel plan large-scale trainers use for it
(torchtitan's): embeddings row-parallel with sequence-sharded output, norms
sequence-parallel, attention and MLP inputs gathered, q/k/v/gate/up column-parallel,
o/down row-parallel back to sequence shards. Used by parallel.py (sequence parallel
at 2 ranks) and two_d.py (FSDP2 x tensor/sequence parallel on a 2 x 2 mesh); each
compares the parameters after a few SGD steps with one device on the same global batch."""
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

VOCAB, DIM, HEADS, KV_HEADS, FFN, LAYERS, SEQ = 64, 32, 4, 2, 64, 2, 8


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = DIM // HEADS
        self.wq = nn.Linear(DIM, HEADS * self.head_dim, bias=False)
        self.wk = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.wv = nn.Linear(DIM, KV_HEADS * self.head_dim, bias=False)
        self.wo = nn.Linear(HEADS * self.head_dim, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds a slice of them.
        q = self.wq(x).view(b, t, -1, self.head_dim)
        k = self.wk(x).view(b, t, -1, self.head_dim)
        v = self.wv(x).view(b, t, -1, self.head_dim)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(DIM, FFN, bias=False)
        self.w2 = nn.Linear(FFN, DIM, bias=False)
        self.w3 = nn.Linear(DIM, FFN, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.RMSNorm(DIM, eps=1e-6)
        self.attention = Attention()
        self.ffn_norm = nn.RMSNorm(DIM, eps=1e-6)
        self.feed_forward = FeedForward()

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class LlamaStyle(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM, eps=1e-6)
        self.output = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]  # the whole sequence: tokens are replicated
        hd = DIM // HEADS
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=tokens.device).float() / hd))
        freqs = torch.outer(torch.arange(t, device=tokens.device).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # (t, 1, head_dim)
        cos, sin = emb.cos(), emb.sin()
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def make():
    torch.manual_seed(0)
    return LlamaStyle()


def parallelize(model, tp_mesh):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    for i in range(LAYERS):
        p = f"layers.{i}."
        plan.update({
            p + "attention_norm": SequenceParallel(),
            p + "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                                desired_input_layouts=(Replicate(), None, None)),
            p + "attention.wq": ColwiseParallel(),
            p + "attention.wk": ColwiseParallel(),
            p + "attention.wv": ColwiseParallel(),
            p + "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            p + "ffn_norm": SequenceParallel(),
            p + "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),),
                                                   desired_input_layouts=(Replicate(),)),
            p + "feed_forward.w1": ColwiseParallel(),
            p + "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            p + "feed_forward.w3": ColwiseParallel(),
        })
    return parallelize_module(model, tp_mesh, plan)


def batches(global_batch, steps=3):
    g = torch.Generator().manual_seed(11)
    return [torch.randint(0, VOCAB, (global_batch, SEQ + 1), generator=g) for _ in range(steps)]


def train(model, data, take, dev):
    # SGD: updates linear in the gradients, so reduction-order rounding stays at
    # rounding level (Adam would divide tiny gradients by their own size).
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, foreach=False)
    for seq in data:
        x = take(seq).to(dev)
        opt.zero_grad()
        logits = model(x[:, :-1])
        F.cross_entropy(logits.reshape(-1, VOCAB).float(), x[:, 1:].reshape(-1)).backward()
        opt.step()


def single_device(data):
    ref = make()
    train(ref, data, lambda t: t, torch.device("cpu"))
    return ref


def assert_equal_to(model, ref, what):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close(p.full_tensor().detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5,
                     msg=lambda m: f"{what} {name}: {m}")


def sequence_parallel(rank, tp_mesh, dev):
    """Tensor + sequence parallel over `tp_mesh`, the same global batch on every rank."""
    data = batches(2)
    ref = single_device(data)
    model = parallelize(make().to(dev), tp_mesh)
    train(model, data, lambda t: t, dev)
    assert_equal_to(model, ref, "llama-style sequence parallel")
    print(f"rank {rank}: llama-style sequence parallel OK", flush=True)


def two_dimensional(rank, mesh, dev):
    """FSDP2 along mesh["dp"] (each its slice of the batch) over tensor + sequence
    parallel along mesh["tp"]."""
    from torch.distributed.fsdp import fully_shard
    dp, dp_size = mesh["dp"].get_local_rank(), mesh["dp"].size()
    data = batches(2 * dp_size)
    ref = single_device(data)
    model = parallelize(make().to(dev), mesh["tp"])
    for layer in model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    train(model, data, lambda t: t[2 * dp:2 * (dp + 1)], dev)
    assert_equal_to(model, ref, "llama-style 2-D")
    print(f"rank {rank}: llama-style 2-D OK", flush=True)


def compiled_sequence_parallel(rank, tp_mesh, dev):
    """The tensor + sequence parallel model under torch.compile(backend="neuron"): the
    forward and backward graphs run as programs with their collectives inside (the
    all-gathers along the sequence are split and concatenated views of the collective's
    result), and training equals one device."""
    import torchneuron
    data = batches(2)
    ref = single_device(data)
    model = parallelize(make().to(dev), tp_mesh)
    torchneuron.reset_compile_metrics()
    train(torch.compile(model, backend="neuron"), data, lambda t: t, dev)
    assert_equal_to(model, ref, "compiled llama-style sequence parallel")
    records = torchneuron.compile_metrics()
    progs = [p for r in records for p in r["programs"].values()]
    assert progs and all(p["executor"] == "compiler" for p in progs), \
        f"every graph a program: {[(p['executor'], p['reason']) for p in progs]}"
    assert all(p["collectives"] >= 1 for p in progs), f"collectives inside the programs: {progs}"
    print(f"rank {rank}: compiled llama-style sequence parallel OK", flush=True)


def compiled_fsdp2(rank, mesh, dev):
    """FSDP2 (fully_shard per layer and at the root) of the model under
    torch.compile(backend="neuron"): FSDP's hooks run eagerly around the programs and
    free each unsharded parameter (resize_(0)) while the program reading it is still
    queued; training equals one device."""
    import torchneuron
    from torch.distributed.fsdp import fully_shard
    world = mesh.size()
    data = batches(2 * world)
    ref = single_device(data)
    model = make().to(dev)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    torchneuron.reset_compile_metrics()
    train(torch.compile(model, backend="neuron"), data, lambda t: t[2 * rank:2 * (rank + 1)], dev)
    assert_equal_to(model, ref, "compiled llama-style fsdp2")
    progs = [p for r in torchneuron.compile_metrics() for p in r["programs"].values()]
    assert progs and all(p["executor"] == "compiler" for p in progs), \
        f"every graph a program: {[(p['executor'], p['reason']) for p in progs]}"
    print(f"rank {rank}: compiled llama-style fsdp2 OK", flush=True)
