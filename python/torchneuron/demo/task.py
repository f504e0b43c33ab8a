"""The synthetic task: addition of two whole numbers, written in decimal.

A problem is the prompt "27+58=" and its answer "85". The problems come from a
seed, so every run sees the same train and held-out splits, and the two are
disjoint (no held-out problem is ever trained on).
"""
import random
from dataclasses import dataclass

ALPHABET = "0123456789+="


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a}+{self.b}="

    @property
    def answer(self) -> str:
        return str(self.a + self.b)


def parse(prompt: str) -> Problem:
    """The problem a prompt states; ValueError if it is not "<a>+<b>="."""
    if not prompt.endswith("=") or prompt.count("+") != 1:
        raise ValueError(f"not an addition prompt: {prompt!r}")
    a, b = prompt[:-1].split("+")
    if not (a.isdigit() and b.isdigit()):
        raise ValueError(f"not an addition prompt: {prompt!r}")
    return Problem(int(a), int(b))


def check(prompt: str, completion: str) -> bool:
    """Whether `completion` (the text generated after the prompt) is exactly
    the right answer: no other characters, no leading zeros."""
    return completion == parse(prompt).answer


def answer_length(digits: int = 2) -> int:
    """The most characters an answer can have, e.g. 3 for "99+99=" -> "198"."""
    return len(str(2 * (10 ** digits - 1)))


def splits(seed: int, n_train: int, n_test: int, digits: int = 2):
    """(train, held_out): disjoint lists of problems with operands below
    10**digits, drawn without replacement from all such pairs."""
    size = 10 ** digits
    total = size * size
    if n_test >= total:
        raise ValueError(f"{n_test} held-out problems leave none to train on ({total} exist)")
    n_train = min(n_train, total - n_test)
    codes = random.Random(seed).sample(range(total), n_test + n_train)
    problems = [Problem(c // size, c % size) for c in codes]
    return problems[n_test:], problems[:n_test]
