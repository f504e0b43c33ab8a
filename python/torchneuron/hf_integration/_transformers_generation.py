"""Transformers generation adaptation (15). Checked against transformers 5.23.0.

15. `transformers.generation.utils.DeferredStopCheck`: the decoding loop reads
   its stop flag one step late on neuron
   `generate()`'s sampling loop (greedy and multinomial) asks after every
   step whether each row has finished (`unfinished_sequences.max() == 0`),
   which makes the host wait for the device to finish the step before it can
   queue the next one: host and device take turns. Transformers has the
   remedy, `DeferredStopCheck`: the flag is copied to host memory
   asynchronously and read one step later, so the host queues step N+1 while
   the device runs step N. When a row stops on EOS, one extra step has run;
   Transformers undoes it (its tokens are dropped, a returned cache is
   cropped). Transformers enables it for "mps" only (`is_supported`), and
   pins its host flags only on "cuda", without which a copy from the device
   waits for the device.
   For inputs on neuron, `is_supported` answers with the conditions
   Transformers sets for "mps" (not an assistant model; no cache, a croppable
   one, or one the caller does not get back), and the host flags (and the
   streamer's token buffers) are pinned, so the device copies into them from
   its queue. Compiled batch-1 decoding of the ~100M Llama of
   benchmarks/generate.py ran 1.19-1.21x faster in bfloat16 and 1.09-1.10x in
   float32 (medians of A/B pairs in one process; eager decoding, bound by its
   host, unchanged; docs/performance/compile.md, "Decoding without a wait per token").
   Tokens are unchanged: tests/test_hf_generate.py compares EOS stops,
   streamers and returned caches with CPU's.
"""
import collections
import functools

import torch

from ._common import PATCHED_ATTR, classes_to_adapt

# The device Transformers enables the deferred check for; its conditions are reused for neuron.
_ENABLED_DEVICE = torch.device("mps")


def _pinned(value):
    if isinstance(value, torch.Tensor) and value.device.type == "cpu" and not value.is_pinned():
        return value.pin_memory()
    return value


def _patch_deferred_stop_check(module):
    found = classes_to_adapt(module, ("DeferredStopCheck",), "neuron decoding waits for the device after every "
                             "step", members=("is_supported", "__init__"))
    if found is None:
        return
    (cls,) = found
    original_is_supported = cls.is_supported  # the function under the staticmethod
    original_init = cls.__init__

    @functools.wraps(original_is_supported)
    def is_supported(device, *args, **kwargs):
        if torch.device(device).type == "neuron":
            device = _ENABLED_DEVICE
        return original_is_supported(device, *args, **kwargs)

    @functools.wraps(original_init)
    def __init__(self, input_ids, *args, **kwargs):
        original_init(self, input_ids, *args, **kwargs)
        if input_ids.device.type == "neuron":
            # Copies from the device into pageable memory wait for the device; into pinned memory they queue.
            self.slots = collections.deque(tuple(_pinned(v) for v in slot) for slot in self.slots)

    cls.is_supported = staticmethod(is_supported)
    cls.__init__ = __init__
    setattr(cls, PATCHED_ATTR, True)


CLASS_PATCHES = {"transformers.generation.utils": [_patch_deferred_stop_check]}
