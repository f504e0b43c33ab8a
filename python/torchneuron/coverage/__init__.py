"""Hugging Face causal-LM coverage of the `neuron` device.

Builds a tiny random model of each architecture in a list, runs it on CPU and on
the device with identical weights, and compares forward logits, greedy generation
with the dynamic and the static cache, gradients, a left-padded batch, sampling,
bfloat16 logits, sdpa against eager attention and the text-generation pipeline;
then under `torch.compile` with the Dynamo backend "neuron": forward logits, and
static-cache generation auto-compiled by Transformers (tokens equal, compilations
counted, no recompilation in a second call).
See `cli` for the command line (`python -m torchneuron.coverage --all-causal-lm
--out DIR`, or `--list FILE`; `--stages compiled_forward,compiled_generate`; `--merge`
to join runs of different stages), `tiny_configs` for the configurations (tuned
values per architecture) and `derive` for those derived from any config class's
defaults, `runner` for how a stage runs, `model_stages`, `generation_stages` and
`compile_stages` for what each stage compares, `routing` for the experts each token
of a mixture-of-experts model is routed to (forward_bf16 leaves out the tokens the
device routes differently from CPU), and `outcome` for how a failure is told apart
(the device, the CPU reference, a missing package).
`more_architectures.tsv` lists architectures beyond the project's shared list
(hybrids, MLA variants, partial rotary, per-layer embeddings) whose tiny
configurations needed care; the documented run covers every architecture of
Transformers' causal-LM auto mapping.
"""


def main(argv=None):
    from .cli import main as _main

    return _main(argv)


def run_architecture(row, **kwargs):
    from .runner import run_architecture as _run

    return _run(row, **kwargs)


__all__ = ["main", "run_architecture"]
