"""The chat dataset on disk: `train.jsonl` and `test.jsonl` in the
conversational `messages` format, which `datasets.load_dataset(directory)`
reads as the splits "train" and "test", as it reads a dataset from the Hub."""
import json
from pathlib import Path


def write_dataset(directory, train, held_out):
    """Writes the problems' conversations; returns the directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, problems in (("train", train), ("test", held_out)):
        with open(directory / f"{name}.jsonl", "w") as f:
            for p in problems:
                f.write(json.dumps({"messages": p.messages()}) + "\n")
    return directory
