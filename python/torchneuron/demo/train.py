"""The fine-tune loop: AdamW with warm-up and cosine decay, the loss on the
answer tokens only."""
import math
import time

import torch


def encode(problems, tokenizer):
    """(input_ids, labels, attention_mask) of "<bos>prompt answer<eos>" per
    problem, right-padded to one length (position ids then start at 0 in every
    row, as they do for left-padded prompts in generation). Labels are -100
    except on the answer and its <eos>."""
    rows, starts = [], []
    for p in problems:
        prompt = tokenizer(p.prompt).input_ids  # starts with <bos>
        answer = tokenizer(p.answer, add_special_tokens=False).input_ids
        rows.append(prompt + answer + [tokenizer.eos_token_id])
        starts.append(len(prompt))
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for i, (row, start) in enumerate(zip(rows, starts)):
        ids[i, :len(row)] = torch.tensor(row)
        labels[i, start:len(row)] = ids[i, start:len(row)]
        mask[i, :len(row)] = 1
    return ids, labels, mask


def train(model, tokenizer, problems, device, steps, batch_size=64, lr=3e-3, warmup=30,
          log_every=25, seed=0, log=print):
    """Trains `model` (already on `device`) in place; returns the mean loss of
    each logged interval."""
    ids, labels, mask = encode(problems, tokenizer)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (
        1 + math.cos(math.pi * min(1.0, s / max(1, steps)))))
    order = torch.Generator().manual_seed(seed)
    model.train()
    losses, running, start = [], torch.zeros((), device=device), time.perf_counter()
    for step in range(1, steps + 1):
        pick = torch.randint(len(ids), (batch_size,), generator=order)
        batch = {k: v[pick].to(device, non_blocking=True)
                 for k, v in (("input_ids", ids), ("labels", labels), ("attention_mask", mask))}
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        # Summed on the device: reading the loss every step would wait for the
        # queue each time.
        running += loss.detach()
        if step % log_every == 0 or step == steps:
            n = (step - 1) % log_every + 1
            losses.append(running.item() / n)
            running.zero_()
            elapsed = time.perf_counter() - start
            log(f"  step {step:4d}/{steps}  loss {losses[-1]:.4f}  {elapsed:6.1f}s  "
                f"{step / elapsed:5.1f} steps/s", flush=True)
    model.eval()
    return losses
