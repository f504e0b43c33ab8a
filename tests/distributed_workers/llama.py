"""A small Transformers LlamaForCausalLM (from a config, random weights) under torchrun.
Usage: llama.py train DIR (2 ranks) | llama.py reload DIR (another world size).

train: FSDP2 (fully_shard per decoder layer), tensor parallelism (parallelize_module,
colwise q/k/v/gate/up, rowwise o/down) and tensor + sequence parallelism (the norms and
the residual stream sharded along the sequence) each train a few SGD steps; the
parameters equal a single-device run on CPU on the same global batch. The FSDP2 model is saved with
torch.distributed.checkpoint to DIR/dcp and exported as a standard Transformers
safetensors checkpoint to DIR/hf, which loads on CPU with the same weights (bit for bit)
and logits.
reload: a model sharded over this world size loads DIR/dcp (resharded) with the exported
weights bit for bit; from_pretrained(DIR/hf, tp_plan="auto") gives the single-device
logits."""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.testing import assert_close

from common import check, rank_env

STEPS, PER_RANK, SEQ = 3, 2, 16


def config():
    from transformers import LlamaConfig
    # Head counts and widths divide by 2 and 3 (the world sizes of the two launches).
    return LlamaConfig(vocab_size=96, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=6, num_key_value_heads=6, max_position_embeddings=64,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)


def build(seed=0):
    from transformers import LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(config()).float()


def batches(world):
    g = torch.Generator().manual_seed(7)
    return [torch.randint(3, 96, (PER_RANK * world, SEQ), generator=g) for _ in range(STEPS)]


def train(model, data, take, dev, **call):
    # SGD keeps the updates linear in the gradients: Adam divides tiny gradients by
    # their own size, so a rounding-level difference of the reduction order could
    # move a rarely used embedding row by a visible step.
    # foreach=False: under tensor parallelism only the parallel layers' parameters are
    # DTensors, and foreach kernels refuse a mix.
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9, foreach=False)
    for ids in data:
        x = take(ids).to(dev)
        opt.zero_grad()
        model(input_ids=x, labels=x, **call).loss.backward()
        opt.step()


def full(p):
    return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().cpu()


def same_params(model, ref, what):
    ref_params = dict(ref.named_parameters())
    for name, p in model.named_parameters():
        assert_close(full(p), ref_params[name].detach(), rtol=1e-4, atol=1e-5,
                     msg=lambda m: f"{what} {name}: {m}")


def shard(model, mesh):
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def tensor_parallel(model, mesh):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    plan = {}
    for i in range(len(model.model.layers)):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    return parallelize_module(model, mesh, plan)


def sequence_parallel(model, mesh):
    """Tensor parallelism as above, with the norms, the residual stream and the
    embedding's output sharded along the sequence (torch's Llama recipe): attention
    and MLP gather the sequence and their last projection reduce-scatters it."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    plan = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "model.norm": SequenceParallel(),
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    for i in range(len(model.model.layers)):
        p = f"model.layers.{i}."
        plan.update({
            p + "input_layernorm": SequenceParallel(),
            # The decoder layer passes hidden_states to attention by keyword.
            p + "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                desired_input_kwarg_layouts={"hidden_states": Replicate()},
                                                use_local_output=True),
            p + "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            p + "post_attention_layernorm": SequenceParallel(),
            p + "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                          use_local_output=True),
            p + "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
        })
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[p + name] = ColwiseParallel()
    return parallelize_module(model, mesh, plan)


def logits(model, ids, dev):
    with torch.no_grad():
        return model(input_ids=ids.to(dev)).logits.cpu()


def run_train(root, rank, world, dev, mesh):
    data = batches(world)
    ref = build()
    train(ref, data, lambda t: t, torch.device("cpu"))

    fsdp = shard(build().to(dev), mesh)
    train(fsdp, data, lambda t: t[rank * PER_RANK:(rank + 1) * PER_RANK], dev)
    same_params(fsdp, ref, "fully_shard")
    print(f"rank {rank}: llama fsdp2 OK", flush=True)

    tp = tensor_parallel(build().to(dev), mesh)
    train(tp, data, lambda t: t, dev)
    same_params(tp, ref, "tensor parallel")
    print(f"rank {rank}: llama tensor parallel OK", flush=True)

    # Each rank's embedding output holds part of the sequence: the positions (and so
    # the rotary angles) of the whole sequence are passed, not derived from it.
    sp = sequence_parallel(build().to(dev), mesh)
    train(sp, data, lambda t: t, dev, position_ids=torch.arange(SEQ, device=dev).unsqueeze(0),
          use_cache=False)
    same_params(sp, ref, "sequence parallel")
    print(f"rank {rank}: llama sequence parallel OK", flush=True)

    # torch.distributed.checkpoint: every rank writes its shards.
    dcp.save({"model": get_model_state_dict(fsdp)}, checkpoint_id=os.path.join(root, "dcp"))
    # A standard Transformers checkpoint from the gathered state dict.
    # (Full tensors on every rank: with cpu_offload only rank 0 would get them.)
    state = {k: v.cpu() for k, v in
             get_model_state_dict(fsdp, options=StateDictOptions(full_state_dict=True)).items()}
    hf_dir = os.path.join(root, "hf")
    if rank == 0:
        cpu = build(seed=1)
        cpu.load_state_dict(state)
        cpu.save_pretrained(hf_dir, safe_serialization=True)
    dist.barrier()
    from transformers import LlamaForCausalLM
    loaded = LlamaForCausalLM.from_pretrained(hf_dir)
    check(os.path.exists(os.path.join(hf_dir, "model.safetensors")), "a safetensors file")
    for name, p in loaded.named_parameters():
        check(torch.equal(p.detach(), state[name]), f"exported {name} equals the sharded model's")
    ids = torch.randint(3, 96, (2, SEQ), generator=torch.Generator().manual_seed(11))
    cpu_ref = build(seed=2)
    cpu_ref.load_state_dict(state)
    check(torch.equal(logits(loaded, ids, "cpu"), logits(cpu_ref, ids, "cpu")), "identical CPU logits")
    assert_close(logits(fsdp, ids, dev), logits(loaded, ids, "cpu"), rtol=1e-4, atol=1e-5,
                 msg=lambda m: f"sharded model's logits against the export on CPU: {m}")
    print(f"rank {rank}: llama checkpoint and export OK", flush=True)


def run_reload(root, rank, world, dev, mesh):
    from transformers import AutoModelForCausalLM
    hf_dir = os.path.join(root, "hf")
    exported = AutoModelForCausalLM.from_pretrained(hf_dir)
    model = shard(build(seed=3).to(dev), mesh)  # other weights, until loaded
    state = {"model": get_model_state_dict(model)}
    dcp.load(state, checkpoint_id=os.path.join(root, "dcp"))
    set_model_state_dict(model, state["model"])
    reference = dict(exported.named_parameters())
    for name, p in model.named_parameters():
        check(torch.equal(full(p), reference[name].detach()), f"{name} after resharding to {world} ranks")
    ids = torch.randint(3, 96, (2, SEQ), generator=torch.Generator().manual_seed(11))
    expected = logits(exported, ids, "cpu")
    assert_close(logits(model, ids, dev), expected, rtol=1e-4, atol=1e-5,
                 msg=lambda m: f"resharded logits: {m}")
    print(f"rank {rank}: llama dcp reload at world size {world} OK", flush=True)

    tp = AutoModelForCausalLM.from_pretrained(hf_dir, tp_plan="auto")
    check(tp.device.type == "neuron", f"tp_plan='auto' placed the model on {tp.device}")
    q = tp.model.layers[0].self_attn.q_proj.weight
    local = q.to_local() if hasattr(q, "to_local") else q
    check(local.shape[0] == 48 // world, f"q_proj is split over {world} ranks: local shape {tuple(local.shape)}")
    assert_close(logits(tp, ids, tp.device), expected, rtol=1e-4, atol=1e-5,
                 msg=lambda m: f"tp_plan='auto' logits: {m}")
    print(f"rank {rank}: llama tp_plan auto OK", flush=True)


def main():
    phase, root = sys.argv[1], sys.argv[2]
    rank, world, local_rank = rank_env()
    mesh = init_device_mesh("neuron", (world,))
    dev = torch.device("neuron", local_rank)
    (run_train if phase == "train" else run_reload)(root, rank, world, dev, mesh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
