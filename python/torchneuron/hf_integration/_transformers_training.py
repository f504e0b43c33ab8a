"""Transformers training adaptations (8, 10). Checked against transformers 5.23.0.

8. `transformers.utils.import_utils.is_torch_neuron_available`
   Transformers' own neuron detection asks for AWS's `torch_neuronx`, as
   Accelerate's does (1). Without it `TrainingArguments` puts training on the
   CPU (`args.device` is cpu, so the Trainer feeds CPU batches to a neuron model),
   `TrainingArguments(torch_compile=True)` picks Inductor instead of the
   backend "neuron", and `TrainingArguments(bf16=True)` is refused ("Your
   setup doesn't support bf16/gpu"). The
   wrapper also answers True when the `neuron` device of torchneuron is
   PyTorch's accelerator; then the Trainer trains on `neuron:0`, compiles
   with `torch.compile(backend="neuron")`, and `is_torch_bf16_gpu_available()`
   asks `torch.neuron.is_bf16_supported()`. Like the original, the answer is
   marked a constant for torch.compile (fixed for the process).

10. `transformers.trainer.Trainer._save_rng_state` / `_load_rng_state`: the
   neuron generators are checkpointed
   A Trainer checkpoint (`rng_state.pth`) holds the Python, NumPy and CPU
   generators and those of the devices Transformers knows (CUDA, XLA, NPU,
   HPU, MLU, MUSA), not neuron's. Dropout on neuron draws from the device's
   generator, so a run resumed with `train(resume_from_checkpoint=...)`
   drew other masks than the uninterrupted run and its losses went apart
   from the first step after the checkpoint. When `neuron` is the
   accelerator, the wrapped `_save_rng_state` adds a `"neuron"` entry to the
   file the original wrote, as Transformers stores CUDA's (every core's state
   in distributed training, the current core's otherwise), and the wrapped
   `_load_rng_state` puts it back after the original has restored the
   others. A checkpoint without the entry (written on CPU or before this
   adaptation) resumes as before. TRL's trainers inherit both methods.
"""
import contextlib
import functools
import os

import torch

from ._common import PATCHED_ATTR, classes_to_adapt, neuron_is_accelerator

_NEURON_KEY = "neuron"


def _wrap_is_torch_neuron_available(original):
    def is_torch_neuron_available(check_device=False):
        if neuron_is_accelerator():
            return True
        return original(check_device)

    is_torch_neuron_available._dynamo_marked_constant = True  # as Transformers marks the original
    return is_torch_neuron_available


def _rng_file(trainer, directory):
    """The file Trainer's own `_save_rng_state` writes in `directory`."""
    if trainer.args.world_size <= 1:
        return os.path.join(directory, "rng_state.pth")
    return os.path.join(directory, f"rng_state_{trainer.args.process_index}.pth")


def _distributed(trainer, module):
    mode = getattr(module, "ParallelMode", None)
    return mode is not None and trainer.args.parallel_mode == mode.DISTRIBUTED


def _load_states(module, path):
    safe_globals = getattr(module, "safe_globals", None)  # lets NumPy's generator state load with weights_only
    with safe_globals() if safe_globals is not None else contextlib.nullcontext():
        return torch.load(path, weights_only=True)


def _patch_trainer(module):
    found = classes_to_adapt(module, ("Trainer",), "Trainer checkpoints will not hold the neuron generators",
                             members=("_save_rng_state", "_load_rng_state"))
    if found is None:
        return
    (cls,) = found
    original_save, original_load = cls._save_rng_state, cls._load_rng_state

    @functools.wraps(original_save)
    def _save_rng_state(self, output_dir):
        original_save(self, output_dir)
        if not neuron_is_accelerator():
            return
        path = _rng_file(self, output_dir)
        states = _load_states(module, path)
        if _distributed(self, module):
            states[_NEURON_KEY] = torch.neuron.get_rng_state_all()
        else:
            states[_NEURON_KEY] = torch.neuron.get_rng_state()
        torch.save(states, path)

    @functools.wraps(original_load)
    def _load_rng_state(self, checkpoint):
        original_load(self, checkpoint)
        if checkpoint is None or not neuron_is_accelerator():
            return
        path = _rng_file(self, checkpoint)
        if not os.path.isfile(path):
            return  # the original has said why
        state = _load_states(module, path).get(_NEURON_KEY)
        if state is None:
            return  # written on CPU, or before this adaptation: resumes as before
        if _distributed(self, module):
            torch.neuron.set_rng_state_all(state)
        else:
            torch.neuron.set_rng_state(state)

    cls._save_rng_state = _save_rng_state
    cls._load_rng_state = _load_rng_state
    setattr(cls, PATCHED_ATTR, True)


TARGETS = {
    "transformers.utils.import_utils": [
        ("is_torch_neuron_available", lambda f, m: _wrap_is_torch_neuron_available(f)),
    ],
}
CLASS_PATCHES = {
    "transformers.trainer": [_patch_trainer],
}
