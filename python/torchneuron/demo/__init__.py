"""The main job's demo: fine-tune a small Qwen3 chat model with TRL on two
neuron cores, end to end.

    python -m torchneuron.demo [--steps N] [--device neuron|cpu] [--cores 2] [--out DIR] [--seed S] [--quick]

It generates a chat dataset whose answers it can check (the user asks "What is
27+58?", the assistant answers "85"), in the conversational `messages` format;
builds a Qwen3 chat model (`transformers.Qwen3ForCausalLM` from a `Qwen3Config`,
fresh random weights, since nothing can be downloaded) with a chat tokenizer of
its own, and saves both as the starting checkpoint. Then it fine-tunes with a
standard TRL script (`sft.py`: `SFTConfig`, `SFTTrainer`, as TRL's own example)
under `accelerate launch` with Accelerate's FSDP2 config, one process per
neuron core, writes a standard Transformers checkpoint, reloads it on CPU and
on neuron, and prints held-out accuracy before and after, whether the two
devices' greedy completions agree, training tokens per second and each core's
peak memory. `--device cpu` runs the same script in one CPU process as a
reference.

One concept per module: `task` (problems, splits, the checker), `tokenizer`,
`dataset` (the files TRL loads), `model` (the Qwen3 config), `sft` (the
training script) with `report` (its callback), `launch` (the configs and the
launch command), `evaluate` (accuracy by greedy generation), and `__main__`
(the command line).
"""
