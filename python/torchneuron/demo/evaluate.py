"""Held-out accuracy by greedy generation, and generation speed."""
import time
from dataclasses import dataclass

import torch

from .task import answer_length, check


@dataclass
class Result:
    completions: list  # generated text after each prompt, up to <eos>
    correct: int  # completions exactly right
    accuracy: float  # correct / number of problems
    new_tokens: int  # generated tokens up to and including each row's first <eos>
    seconds: float  # wall time of the generate() calls, results on the host

    @property
    def tokens_per_second(self):
        return self.new_tokens / self.seconds


@torch.no_grad()
def evaluate(model, tokenizer, problems, device, batch_size=128, max_new_tokens=answer_length() + 1):
    """Generates an answer for each problem greedily, in left-padded batches,
    with room for the longest possible answer and its <eos>."""
    prompts = [p.prompt for p in problems]
    model.eval()
    eos = tokenizer.eos_token_id
    completions, new_tokens, seconds = [], 0, 0.0
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[i:i + batch_size], padding=True, return_tensors="pt").to(device)
        start = time.perf_counter()
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False).cpu()
        seconds += time.perf_counter() - start
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            # Rows that stopped early are padded; the padding is not counted.
            n = row.index(eos) + 1 if eos in row else len(row)
            new_tokens += n
            # Special tokens other than the final <eos> stay in the text, so an
            # answer with a stray <pad> in it counts as wrong.
            completions.append(tokenizer.decode(row[:n - 1] if eos in row else row))
    correct = sum(map(check, prompts, completions))
    return Result(completions, correct, correct / len(prompts), new_tokens, seconds)
