"""The synthetic task: a chat where the user asks for the sum of two whole
numbers and the assistant answers with it.

A problem is the question "What is 27+58?" and its answer "85". The problems
come from a seed, so every run sees the same train and held-out splits, and the
two are disjoint (no held-out problem is ever trained on).
"""
import random
import re
from dataclasses import dataclass

# Every character a conversation's text can hold (the tokenizer's alphabet).
ALPHABET = "0123456789+?= Whatis"

_QUESTION = re.compile(r"What is (\d+)\+(\d+)\?")


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def question(self) -> str:
        return f"What is {self.a}+{self.b}?"

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    def messages(self, with_answer=True):
        """The conversation in the `messages` format of chat datasets."""
        chat = [{"role": "user", "content": self.question}]
        if with_answer:
            chat.append({"role": "assistant", "content": self.answer})
        return chat


def parse(question: str) -> Problem:
    """The problem a question states; ValueError if it is not "What is <a>+<b>?"."""
    m = _QUESTION.fullmatch(question)
    if m is None:
        raise ValueError(f"not an addition question: {question!r}")
    return Problem(int(m.group(1)), int(m.group(2)))


def check(question: str, completion: str) -> bool:
    """Whether `completion` (the assistant's reply, up to its end-of-turn) is
    exactly the right answer: no other characters, no leading zeros."""
    return completion == parse(question).answer


def answer_length(digits: int = 2) -> int:
    """The most characters an answer can have, e.g. 3 for 99+99 -> "198"."""
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
