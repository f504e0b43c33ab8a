"""torch.compile benchmark: `backend="neuron"` against neuron eager and Inductor on CPU.

    python benchmarks/compile.py [--quick] [--only CASE ...] [--dtypes float32 bfloat16] [--rounds R]

Cases (each peer of each case and dtype runs in its own fresh process, see
fresh_process.py):
  block        inference forward of a pre-norm transformer block (RMSNorm,
               attention through scaled_dot_product_attention, SwiGLU MLP)
  mlp_train    training step of a 2-layer GELU MLP (compiled forward and
               backward, AdamW step)
  adamw_step   that MLP's AdamW step alone (5.3M parameters, PyTorch's default
               foreach implementation), compiled: torch.compile(opt.step)
  block_train  training step of the transformer block
  pointwise    inference of the block's elementwise work alone: SwiGLU's
               silu(gate) * up over a fused gate/up output (4 x 256 x 2 x 3072)
               and an RMS normalization of the result (the fused groups)
  llama_train  training step of the Llama of generate.py cut to 2 of its 12
               layers (the layers are alike), batch 2 x 128 tokens, labels = ids,
               no KV cache (use_cache=False, as training runs)
  decode_bs1   greedy decoding of the ~100M Llama of generate.py, static cache,
  decode_bs8   batch 1 and 8 (Transformers compiles the decode step by itself)
Peers:
  eager        neuron eager (decoding with disable_compile=True)
  neuron       torch.compile(backend="neuron") on neuron tensors (decoding
               under Transformers' default auto-compile: backend "neuron")
  inductor     torch.compile (Inductor) on CPU tensors (decoding with
               CompileConfig(backend="inductor"), _compile_all_devices=True);
               its caches go to a fresh directory, so its compile is cold

The machine's memory bandwidth drifts from minute to minute (45 to 86 GB/s
within one run on the machine of docs/performance.md), and each peer runs at
another minute: with --rounds R, every peer's steady figure is measured R
times, the peers alternating in fresh processes, and each keeps its best
round (first calls and compile times stay those of the first round, the only
cold one).

Our backend's program cache and AOTAutograd's start empty (a fresh
TORCHNEURON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR per case and dtype), so its
first call is cold, as Inductor's; a second neuron process then runs the same
case with those caches filled: its first call is the warm start (Dynamo traces
again; AOTAutograd's cache returns each graph with its program; target: at most
1 s beyond Dynamo's tracing).

Reported per case: the steady time per step (or tokens/s) of each peer and the
ratios neuron/eager and neuron/inductor (targets: >= 1.5x eager on the block
and decode, >= 1.0x Inductor on decode and the training step), the first
call's wall time (tracing and compiling included) of each compiled peer, and
the neuron backend's own compile time (compile_metrics(): serializing and
compiling each AOT graph; AOTAutograd's tracing, which Inductor pays too, is
shown apart), and the share of each AOT graph's nodes that ran as fused groups,
the device's kernels or library matrix products (target: >= 90% for the Llama
decode and training graphs). For decoding it also prints the bandwidth bound:
the device's streaming read bandwidth (sums over 512 MiB of device memory in
the neuron peer's process, just before and after its timed decoding; the
higher counts) over the bytes a decoding step reads (every weight but the
input embedding table, of which it reads one row per sequence, and the static
KV cache; target for bfloat16 at batch 1: >= 70% of it), and the share of it
each of neuron and eager reach.

How far compiling can go: a step can run no faster than its work that compiled
programs run exactly as eager does. For the module cases, the eager peer runs
one more step under torch.profiler and the report prints that work's device
time (library matrix products, the device's attention kernels, the optimizer
outside the compiled model) and the ceiling eager step / shared work; for
decoding, the ceiling is the bandwidth bound over eager's tokens/s
(compile_ceiling.py). A ceiling below a target ratio puts that target out of
reach of compiling on the machine measured.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from compile_ceiling import describe  # noqa: E402
from fresh_process import isa_line, measure_in_fresh_process  # noqa: E402

CASES = ("block", "pointwise", "mlp_train", "adamw_step", "block_train", "llama_train", "decode_bs1", "decode_bs8")
PEERS = ("eager", "neuron", "inductor")


def sync(device):
    import torch

    if device.type == "neuron":
        torch.neuron.synchronize(device)


def steady_seconds(step, device, repeats):
    """First call's wall time (compiles) and the median of `repeats` later calls."""
    # The model's upload to the device is queued: let it finish first, so the
    # first call times compiling and running, not the copy (Inductor's peer
    # keeps its model in host memory and has none).
    sync(device)
    t = time.perf_counter()
    step()
    sync(device)
    first = time.perf_counter() - t
    step()  # a second warm-up: the device runs a new signature's first call synchronously
    sync(device)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - t)
    return first, statistics.median(times)


# ---- the models ---------------------------------------------------------------


def make_block(torch, dim, heads):
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = heads
            self.norm1 = nn.RMSNorm(dim)
            self.qkv = nn.Linear(dim, 3 * dim, bias=False)
            self.proj = nn.Linear(dim, dim, bias=False)
            self.norm2 = nn.RMSNorm(dim)
            self.gate = nn.Linear(dim, 4 * dim, bias=False)
            self.up = nn.Linear(dim, 4 * dim, bias=False)
            self.down = nn.Linear(4 * dim, dim, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
            a = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            h = self.norm2(x)
            return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))

    return Block()


def make_pointwise(torch):
    from torch import nn

    class GatedNorm(nn.Module):
        def forward(self, gate_up):
            gate, up = gate_up.chunk(2, dim=-1)
            y = torch.nn.functional.silu(gate) * up
            return y * torch.rsqrt(y.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(y.dtype)

    return GatedNorm()


def make_mlp(torch, dim):
    from torch import nn

    return nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim),
                         nn.GELU(), nn.Linear(dim, dim))


def compiled(torch, model, peer):
    if peer == "eager":
        return model
    return torch.compile(model, backend="inductor" if peer == "inductor" else "neuron")


def measure_module_case(case, peer, dtype_name, quick, repeats):
    import torch

    device = torch.device("cpu" if peer == "inductor" else "neuron")
    dtype = getattr(torch, dtype_name)
    dim, seq, batch = (256, 64, 2) if quick else (768, 256, 4)
    torch.manual_seed(0)
    if case == "mlp_train":
        model = make_mlp(torch, dim)
        x = torch.randn(64, dim)
    elif case == "adamw_step":
        model, x = make_mlp(torch, dim), None
    elif case == "llama_train":
        sys.path.insert(0, os.path.dirname(__file__))
        from generate import build

        model = build(torch.float32)
        model.model.layers = model.model.layers[:2]
        model.config.num_hidden_layers = 2
        ids = torch.randint(3, 16000, (2, 32 if quick else 128), generator=torch.Generator().manual_seed(1))
        x = ids
    elif case == "pointwise":
        model = make_pointwise(torch)
        x = torch.randn(batch, seq, 2 * 4 * dim)
    else:
        model = make_block(torch, dim, 12 if dim % 12 == 0 else 8)
        x = torch.randn(batch, seq, dim)
    model = model.to(device=device, dtype=dtype)
    if case == "adamw_step":
        return measure_optimizer_step(torch, model, peer, device, dtype, repeats)
    x = x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device)
    run = compiled(torch, model, peer)
    if case in ("block", "pointwise"):
        model.eval()

        def step():
            with torch.no_grad():
                run(x)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            opt.zero_grad(set_to_none=True)
            if case == "llama_train":
                run(input_ids=x, labels=x, use_cache=False).loss.backward()
            else:
                run(x).float().square().mean().backward()
            opt.step()

    first, steady = steady_seconds(step, device, repeats)
    return {"steady_s": steady, "first_s": first, **backend_share(peer), **shared_work_of(peer, step, device)}


def shared_work_of(peer, step, device):
    """For neuron eager and compiled: a few more steps under the profiler, and
    their device work that compiled programs run as eager does
    (compile_ceiling.py)."""
    if peer not in ("eager", "neuron"):
        return {}
    from compile_ceiling import PROFILED_STEPS, profile_device_ops, shared_work

    profiles = [profile_device_ops(step, lambda: sync(device)) for _ in range(PROFILED_STEPS)]
    return {"shared_work": shared_work(profiles)}


def measure_optimizer_step(torch, model, peer, device, dtype, repeats):
    """AdamW's step over the model's parameters with fixed gradients: eagerly
    (neuron's foreach path), or the step compiled by the peer's backend."""
    generator = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=generator).to(device=device, dtype=dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = opt.step if peer == "eager" else compiled(torch, opt.step, peer)
    first, steady = steady_seconds(step, device, repeats)
    return {"steady_s": steady, "first_s": first, **backend_share(peer)}


def backend_share(peer):
    """The neuron backend's own compile time (every phase but Dynamo's) and
    how its graphs' nodes ran, from compile_metrics()."""
    if peer not in ("neuron", "neuron_warm"):
        return {}
    import torchneuron

    records = torchneuron.compile_metrics()
    # The backend's own work: folding, serializing and compiling (or loading) each
    # AOT graph (executor_*, which includes fold_* and serialize_*). AOTAutograd's
    # tracing (aot) and Dynamo's (dynamo) are PyTorch's, as Inductor pays them
    # too: shown apart.
    own = sum(ms for r in records for phase, ms in r["times_ms"].items() if phase.startswith("executor_"))
    aot = sum(r["times_ms"].get("aot") or 0 for r in records)
    dynamo = sum(r["times_ms"].get("dynamo") or 0 for r in records)
    caches = sorted({r.get("cache") for r in records if r.get("cache")})
    aot_caches = sorted({r.get("aot_cache") for r in records if r.get("aot_cache")})
    nodes = {}
    for r in records:
        for counts in r["nodes"].values():
            for kind, n in counts.items():
                nodes[kind] = nodes.get(kind, 0) + n
    return {"backend_ms": own, "aot_ms": aot, "dynamo_ms": dynamo, "caches": caches, "aot_caches": aot_caches,
            "graphs": len(records),
            "nodes": nodes, "lowered": lowered_nodes(records),
            "executor": records[0]["executor"] if records else None}


def lowered_nodes(records):
    """Per AOT graph kind: (graph nodes run as our fused groups, the device's kernels or
    library matrix products, all graph nodes but views, the other extern calls' ops).
    Folded constants (scalar immediates, and subgraphs that depend on no input,
    computed at compile time) and copies removed by re-inplacing count as
    lowered (no work left in the program); an eagerly run graph counts every node as extern."""
    out = {}
    for r in records:
        for kind, p in r["programs"].items():
            if p.get("executor") != "compiler":
                n = r["nodes"].get(kind, {}).get("extern", 0)
                out[kind] = (0, n, ["eager: " + str(p.get("reason"))])
                continue
            lowered = (p["fused_nodes"] + p["native_nodes"] + p["folded"] + p.get("constant_folded", 0)
                       + p["reinplaced"] + p["library_calls"])
            total = lowered + p["extern"] - p["library_calls"]
            others = {op: n for op, n in p["extern_ops"].items()
                      if op not in ("aten::mm.default", "aten::addmm.default", "aten::bmm.default",
                                    "aten::baddbmm.default")}
            out[kind] = (lowered, total, others)
    return out


# ---- decoding -------------------------------------------------------------------


def read_bandwidth(torch, device="cpu"):
    """Streaming read bandwidth (bytes/s): the best of a few sums and maxima
    over 512 MiB, far beyond any cache, by `device`'s threads (the CPU's
    intra-op threads, or the neuron device's own, which run its kernels)."""
    x = torch.ones(128 * 1024 * 1024, device=device)
    best = float("inf")
    for reduce in (torch.sum, torch.amax) * 3:
        sync(x.device)
        t = time.perf_counter()
        reduce(x)
        sync(x.device)
        best = min(best, time.perf_counter() - t)
    return x.numel() * x.element_size() / best


def measure_decode(case, peer, dtype_name, quick, repeats):
    import torch
    from transformers import CompileConfig

    sys.path.insert(0, os.path.dirname(__file__))
    from generate import build

    batch = int(case.removeprefix("decode_bs"))
    new_tokens = 16 if quick else 64
    device = torch.device("cpu" if peer == "inductor" else "neuron")
    dtype = getattr(torch, dtype_name)
    model = build(dtype).to(device)
    ids = torch.randint(3, 16000, (batch, 16), generator=torch.Generator().manual_seed(1)).to(device)
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  cache_implementation="static", pad_token_id=0)
    if peer == "eager":
        kwargs["disable_compile"] = True
    elif peer == "inductor":
        config = CompileConfig(backend="inductor")
        config._compile_all_devices = True  # Transformers auto-compiles only accelerators
        kwargs["compile_config"] = config

    def step():
        with torch.no_grad():
            out = model.generate(ids, **kwargs)
        assert out.shape[1] == 16 + new_tokens
        return out

    # The machine's streaming bandwidth drifts from minute to minute (shared
    # memory channels; 45 and 81 GB/s within one run): the bound takes the
    # device's own streaming reads just before and after the timed decoding.
    bandwidths = [read_bandwidth(torch, device)] if peer == "neuron" else []
    first, steady = steady_seconds(step, device, repeats)
    if bandwidths:
        bandwidths.append(read_bandwidth(torch, device))
    out = {"tokens_per_s": batch * new_tokens / steady, "steady_s": steady, "first_s": first,
           "bandwidths": bandwidths, **backend_share(peer), **shared_work_of(peer, step, device)}
    if peer in ("neuron", "neuron_warm"):
        import torchneuron

        out["recompiles_after_first_call"] = sum(
            1 for r in torchneuron.compile_metrics() if r["recompile_reason"])
    out["model_bytes"] = bytes_read_per_step(model, batch, 16 + new_tokens)
    return out


def bytes_read_per_step(model, batch, cache_len):
    """What one decoding step must read from memory: every weight but the input
    embedding table, of which it reads one row per sequence, and the static KV
    cache, which attention reads whole (keys and values of every layer, masked
    beyond the current position)."""
    embedding = model.get_input_embeddings().weight
    weights = sum(p.numel() * p.element_size() for p in model.parameters() if p is not embedding)
    rows = batch * embedding.shape[1] * embedding.element_size()
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    cache = 2 * c.num_hidden_layers * batch * c.num_key_value_heads * head_dim * cache_len * embedding.element_size()
    return weights + rows + cache


def measure(case, peer, dtype_name, quick, repeats):
    if peer == "inductor":
        # A fresh cache: Inductor's compile is measured cold, as ours is.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-")
    if case.startswith("decode"):
        return measure_decode(case, peer, dtype_name, quick, repeats)
    return measure_module_case(case, peer, dtype_name, quick, repeats)


# ---- report -----------------------------------------------------------------------


def report(case, dtype_name, r):
    decode = case.startswith("decode")
    speed = {p: (r[p]["tokens_per_s"] if decode else 1.0 / r[p]["steady_s"]) for p in r}
    unit = "tokens/s" if decode else "ms/step"
    shown = {p: (speed[p] if decode else 1e3 * r[p]["steady_s"]) for p in r}
    cells = "".join(f"{shown[p]:>11.1f}" for p in PEERS)
    ratio_e = speed["neuron"] / speed["eager"]
    ratio_i = speed["neuron"] / speed["inductor"]
    print(f"  {case:<12}{unit:>9}{cells}{ratio_e:>10.2f}x{ratio_i:>10.2f}x", flush=True)
    n = r["neuron"]
    for kind, (lowered, total, others) in n["lowered"].items():
        print(f"  {'':<12}{kind} graph: {lowered} of {total} nodes ({100 * lowered / max(total, 1):.0f}%) as fused "
              f"groups, the device's kernels or library matrix products; other extern calls {others}", flush=True)
    print(f"  {'':<12}first call: neuron {n['first_s']:.2f} s (backend's own "
          f"{n['backend_ms']:.0f} ms, AOTAutograd {n['aot_ms']:.0f} ms, {n['graphs']} graphs, executor {n['executor']}, "
          f"nodes {n['nodes']}), inductor {r['inductor']['first_s']:.2f} s "
          f"({n['first_s'] / r['inductor']['first_s']:.2f}x)", flush=True)
    w = r.get("neuron_warm")
    if w:
        beyond = (w["aot_ms"] + w["backend_ms"]) / 1e3
        print(f"  {'':<12}warm start (programs: {', '.join(w['caches'])}; AOTAutograd's cache: "
              f"{', '.join(w['aot_caches'])}): first call "
              f"{w['first_s']:.2f} s, of which Dynamo {w['dynamo_ms'] / 1e3:.2f} s, AOTAutograd {w['aot_ms'] / 1e3:.2f} s, "
              f"backend {w['backend_ms']:.0f} ms; {beyond:.2f} s beyond Dynamo's tracing before running", flush=True)
    works = {p: r[p]["shared_work"] for p in ("eager", "neuron") if "shared_work" in r[p]}
    if works:
        print(f"  {'':<12}{describe(1e3 * r['eager']['steady_s'], works)}", flush=True)
    if decode:
        print(f"  {'':<12}recompilations after the first call: {n['recompiles_after_first_call']}")
        bandwidth = max(n["bandwidths"])
        batch = int(case.removeprefix("decode_bs"))
        bound = batch * bandwidth / n["model_bytes"]
        measured = " and ".join(f"{b / 1e9:.1f}" for b in n["bandwidths"])
        # A step reads every weight once whatever the batch: compiling cannot
        # decode faster than that, so bound / eager is the ceiling of the
        # compiled / eager ratio.
        print(f"  {'':<12}bandwidth bound {bound:.1f} tokens/s ({n['model_bytes'] / 1e6:.0f} MB read "
              f"per step at {bandwidth / 1e9:.1f} GB/s, the higher of the device's {measured} measured "
              f"just before and after the timed decoding): neuron at {100 * speed['neuron'] / bound:.0f}% "
              f"of it, eager at {100 * speed['eager'] / bound:.0f}%; ceiling for compiled vs eager "
              f"{bound / speed['eager']:.2f}x", flush=True)


def faster_round(first, again):
    """The first round's record (its first call was the cold one) with the
    steady figure, and the bandwidths read around it, of the faster round."""
    if "tokens_per_s" in first:
        better = again["tokens_per_s"] > first["tokens_per_s"]
    else:
        better = again["steady_s"] < first["steady_s"]
    if not better:
        return first
    steady = {k: again[k] for k in ("tokens_per_s", "steady_s", "bandwidths", "shared_work") if k in again}
    return {**first, **steady}


def main():
    parser = argparse.ArgumentParser(description="torch.compile benchmark")
    parser.add_argument("--quick", action="store_true", help="small shapes, 16 new tokens")
    parser.add_argument("--only", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--dtypes", nargs="+", choices=("float32", "bfloat16"),
                        default=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure each peer's steady figure this many times and keep its best")
    parser.add_argument("--child", nargs=5, metavar=("DEVICE", "CASE", "PEER", "DTYPE", "QUICK"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _, case, peer, dtype_name, quick = args.child
        print(json.dumps(measure(case, peer, dtype_name, quick == "1", args.repeats)))
        return
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; each peer of each case "
          "in its own process", flush=True)
    print(isa_line(), flush=True)
    bandwidth = read_bandwidth(torch)
    print(f"streaming read bandwidth {bandwidth / 1e9:.1f} GB/s (sums and maxima over 512 MiB, "
          f"{torch.get_num_threads()} threads)", flush=True)
    for dtype_name in args.dtypes:
        print(f"\n{dtype_name}{' (quick)' if args.quick else ''}")
        print(f"  {'case':<12}{'unit':>9}" + "".join(f"{p:>11}" for p in PEERS)
              + f"{'vs eager':>11}{'vs induct':>11}")
        for case in args.only:
            results = {}
            # Our program cache and AOTAutograd's, empty for the cold peer, then
            # filled for the warm one (Inductor's peer gets a fresh one of its own).
            os.environ["TORCHNEURON_CACHE_DIR"] = tempfile.mkdtemp(prefix="neuron-bench-")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="neuron-bench-torch-")
            for r in range(args.rounds):
                for peer in PEERS + (("neuron_warm",) if r == 0 else ()):
                    device = "cpu" if peer == "inductor" else "neuron"
                    again = measure_in_fresh_process(
                        __file__, device, case, peer, dtype_name, int(args.quick),
                        "--repeats", args.repeats)
                    results[peer] = faster_round(results[peer], again) if r else again
            report(case, dtype_name, results)


if __name__ == "__main__":
    main()
