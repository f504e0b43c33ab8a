"""Hugging Face causal-LM coverage of the `neuron` device.

Builds a tiny random model of each architecture in a list, runs it on CPU and on
the device with identical weights, and compares forward logits, greedy generation
with the dynamic and the static cache, gradients, a left-padded batch, sampling,
bfloat16 logits, sdpa against eager attention and the text-generation pipeline;
then under `torch.compile` with the Dynamo backend "neuron": forward logits, and
static-cache generation auto-compiled by Transformers (tokens equal, compilations
counted, no recompilation in a second call).
See `cli` for the command line (`python -m torchneuron.coverage --list FILE --out
DIR [--stages compiled_forward,compiled_generate]`), `tiny_configs` for the
configurations, `runner` for how a stage runs, and `model_stages`,
`generation_stages` and `compile_stages` for what each stage compares.
`more_architectures.tsv` lists architectures beyond the project's shared list
(hybrids, MLA variants, partial rotary, per-layer embeddings) whose tiny
configurations needed care; the documented run covers both lists.
"""


def main(argv=None):
    from .cli import main as _main

    return _main(argv)


def run_architecture(row, **kwargs):
    from .runner import run_architecture as _run

    return _run(row, **kwargs)


__all__ = ["main", "run_architecture"]
