"""The main job's demo: fine-tune a small Qwen3 on `neuron`, end to end.

    python -m torchneuron.demo [--steps N] [--device neuron] [--out DIR] [--seed S] [--quick]

It builds a small Qwen3-architecture model (`transformers.Qwen3ForCausalLM`
from a `Qwen3Config`, fresh random weights: fine-tuning a freshly built model,
since nothing can be downloaded) and fine-tunes it on a task it generates
itself, whose answers can be checked: adding two numbers ("27+58=" -> "85").
It prints held-out accuracy by greedy generation before and after training,
saves a standard Transformers checkpoint (safetensors weights, config,
tokenizer), reloads it with `from_pretrained(..., device_map="neuron")`,
checks that the reloaded model scores the same, and prints examples,
generation speed in tokens per second and the device's peak memory.

One concept per module: `task` (problems, splits, the checker), `tokenizer`
(a character-level Transformers tokenizer), `model` (the Qwen3 config),
`train` (the fine-tune loop), `evaluate` (generation-based accuracy), and
`__main__` (the command line).
"""
