"""Held-out accuracy by greedy generation of the assistant's reply, and
generation speed."""
import time
from dataclasses import dataclass

import torch

from .task import answer_length, check


@dataclass
class Result:
    completions: list  # the assistant's reply to each question, up to its end of turn
    correct: int  # completions exactly right
    accuracy: float  # correct / number of problems
    new_tokens: int  # generated tokens up to and including each row's first end of turn
    seconds: float  # wall time of the generate() calls, results on the host

    @property
    def tokens_per_second(self):
        return self.new_tokens / self.seconds


def prompts(tokenizer, problems):
    """The chat template applied to each question, ending where the assistant's turn begins."""
    return [tokenizer.apply_chat_template(p.messages(with_answer=False), add_generation_prompt=True,
                                          tokenize=False) for p in problems]


@torch.no_grad()
def evaluate(model, tokenizer, problems, batch_size=128, max_new_tokens=answer_length() + 1):
    """Generates a reply to each problem greedily, in left-padded batches on the
    model's device, with room for the longest possible answer and its end of turn."""
    texts = prompts(tokenizer, problems)
    model.eval()
    eos = tokenizer.eos_token_id
    completions, new_tokens, seconds = [], 0, 0.0
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(texts[i:i + batch_size], padding=True, padding_side="left", return_tensors="pt",
                        add_special_tokens=False).to(model.device)
        start = time.perf_counter()
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False).cpu()
        seconds += time.perf_counter() - start
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            # Rows that stopped early are padded; the padding is not counted.
            n = row.index(eos) + 1 if eos in row else len(row)
            new_tokens += n
            # Special tokens other than the final end of turn stay in the text, so
            # a reply with a stray one in it counts as wrong.
            completions.append(tokenizer.decode(row[:n - 1] if eos in row else row))
    correct = sum(check(p.question, c) for p, c in zip(problems, completions))
    return Result(completions, correct, correct / len(problems), new_tokens, seconds)
