"""A user's Accelerate training loop (a small Qwen3, SGD with momentum,
Accelerate's own data sharding), run by tests/test_hf_accelerate_launch.py under `accelerate launch`
with its DDP and FSDP2 configs, and in the test's own process as the
one-device reference on the same global batch.

    accelerate launch --config_file CONFIG accelerate_loop.py OUT.pt

Rank 0 writes the reduced losses, the full parameters after training,
what each rank ran on, and whether `save_state` / `load_state` (OUT.pt.state)
resumed to the same step, to OUT.pt.
"""
import sys

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from transformers import Qwen3Config, Qwen3ForCausalLM

GLOBAL_BATCH = 8
STEPS = 3
SEQ = 12


def build_model():
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                         tie_word_embeddings=True)  # as small Qwen3 chat models are
    return Qwen3ForCausalLM(config)


def train(accelerator):
    """Trains STEPS steps of GLOBAL_BATCH sequences split over the processes;
    returns (mean loss of each step over all processes, full state dict on
    the main process, the model as prepared)."""
    model = build_model()
    # SGD, not AdamW: AdamW divides each gradient element by its own running
    # magnitude, so an element whose gradient is at rounding level (averaged over
    # two processes or summed in one) moves by up to the learning rate in a
    # direction rounding decides, and parameters could not be compared to
    # float32 tolerance. SGD's update is proportional to the gradient.
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    ids = torch.randint(0, 64, (GLOBAL_BATCH * STEPS, SEQ), generator=torch.Generator().manual_seed(1))
    # Every sequence has SEQ tokens, so the mean of the processes' mean losses is
    # the mean loss of the global batch, and so are the averaged gradients.
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids),
                                         batch_size=GLOBAL_BATCH // accelerator.num_processes)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    losses = []
    for (x,) in loader:
        loss = model(input_ids=x, labels=x).loss
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        losses.append(accelerator.reduce(loss.detach(), "mean").item())
    state = accelerator.get_state_dict(model)  # FSDP2: gathered to the main process
    if accelerator.is_main_process:
        state = {k: v.detach().cpu().clone() for k, v in state.items()}
    return torch.tensor(losses), state, model, opt


def resumes_exactly(accelerator, model, opt, directory):
    """`save_state`, one more step, `load_state`, the same step again: the loss
    and every parameter of the second match the first."""
    accelerator.save_state(directory)
    x = torch.randint(0, 64, (GLOBAL_BATCH // accelerator.num_processes, SEQ),
                      generator=torch.Generator().manual_seed(2 + accelerator.process_index)).to(accelerator.device)

    def step():
        loss = model(input_ids=x, labels=x).loss
        accelerator.backward(loss)
        opt.step()
        opt.zero_grad()
        params = accelerator.get_state_dict(model)
        return loss.item(), {k: v.detach().cpu().clone() for k, v in params.items()}

    first = step()
    accelerator.load_state(directory)
    second = step()
    return first[0] == second[0] and all(torch.equal(first[1][k], second[1][k]) for k in first[1])


def main(out):
    accelerator = Accelerator()
    losses, state, model, opt = train(accelerator)
    resumed = resumes_exactly(accelerator, model, opt, out + ".state")
    ranks = gather_object([{
        "rank": accelerator.process_index,
        "device": str(accelerator.device),
        "current_device": torch.neuron.current_device(),
        "parameters_on": sorted({str(p.device) for p in model.parameters()}),
        "peak_bytes": torch.neuron.max_memory_allocated(accelerator.device),
        "resumed_exactly": resumed,
    }])
    if accelerator.is_main_process:
        torch.save({"losses": losses, "state": state, "ranks": ranks,
                    "distributed_type": str(accelerator.distributed_type),
                    "backend": accelerator.state.backend,
                    "wrapper": type(model).__name__}, out)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
