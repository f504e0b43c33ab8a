"""Hugging Face Accelerate / Transformers / PEFT / TRL / Diffusers / safetensors support for the `neuron` device.

Users run these libraries on `neuron` with the same classes and scripts as on
GPUs. Where a library only knows a fixed list of devices (and AWS's package
names for Neuron), it is taught about torchneuron's device here, and nowhere
else: `from_pretrained(..., device_map="auto")` places the model on the neuron
cores by their capacity instead of silently on the CPU, the Trainer (and TRL's
trainers) train on `neuron:0` with bf16 allowed and checkpoint the device's
generators, PEFT loads adapters onto the device, Diffusers draws with neuron
generators, and the device's errors name the model that ran into them.

Adaptations, one module per library (each module's docstring gives the reason
of each and the library version it was checked against):

| # | what is adapted | module |
| --- | --- | --- |
| 1 | `accelerate.utils.imports.is_neuron_available` | `_accelerate.py` |
| 2 | `accelerate.utils.modeling.get_max_memory` | `_accelerate.py` |
| 3 | `transformers.integrations.accelerate._get_device_map` | `_transformers_device_map.py` |
| 4 | `transformers.integrations.accelerate.check_and_set_device_map` | `_transformers_device_map.py` |
| 5 | `transformers.modeling_utils.PreTrainedModel`: errors name the architecture | `_transformers_models.py` |
| 6 | `transformers.integrations.sdpa_attention.use_gqa_in_sdpa` | `_transformers_models.py` |
| 7 | `PreTrainedModel.get_compiled_call`: sliding-window caches without recompilation | `_transformers_models.py` |
| 8 | `transformers.utils.import_utils.is_torch_neuron_available` | `_transformers_training.py` |
| 9 | `diffusers.utils.torch_utils.randn_tensor` | `_diffusers.py` |
| 10 | `transformers.trainer.Trainer._save_rng_state` / `_load_rng_state` | `_transformers_training.py` |
| 11 | `peft.utils.other.infer_device` | `_peft.py` |
| 12 | `safetensors.torch.load_file` | `_safetensors.py` |
| 13 | TRL's trainer configs: `pad_to_multiple_of="auto"` pads nothing on neuron | `_trl.py` |
| 14 | JetMoe's router and experts: compiled without recompiling when the routing changes | `_transformers_models.py` |
| 15 | `transformers.generation.utils.DeferredStopCheck`: decoding reads its stop flag one step late | `_transformers_generation.py` |
| 16 | `trl.trainer.utils._ChunkedLogProbFunction`: TRL's fused LM head compiles into the model's graphs | `_trl.py` |
| 17 | `trl.kernels.chunked_logprob._addmm_fp32`: the fused LM head's float32 accumulation runs as one mixed-precision product | `_trl.py` |

1-4, 8, 10 and 11 wrap the original and defer to it unchanged unless `neuron` is
PyTorch's current accelerator, i.e.
`torch.accelerator.current_accelerator().type == "neuron"`; 5 and 7 act only
on models placed on a neuron device, 6 and 9 only on tensors on a neuron
device, 12 only when asked for a neuron device, 13 only to TRL configs whose
device is neuron, 14 only while Dynamo traces tensors on a neuron device, 15
only to decoding loops whose inputs are on a neuron device, 16 only while Dynamo
traces tensors on a neuron device, 17 only to eager products of 16-bit tensors
on a neuron device.
Otherwise TRL's trainers are Transformers' Trainer (8, 10) and its LoRA
support is PEFT's (11, 12).

Checked and left alone: the allocator warm-up of `from_pretrained`
(`transformers.modeling_utils.caching_allocator_warmup`) reserves one block of
the model's size on CUDA/XPU devices and skips device type "neuron" (meant for
AWS's devices), so loading onto neuron reserves what the parameters need and
no more (tests/test_hf_loading.py checks that the peak stays below 1.5x the
parameter bytes, also with a CUDA-style warm-up block in front of the load).

How the adaptations are applied, and why this way: importing torchneuron must
stay fast and must not import these libraries (importing Transformers takes
seconds). The libraries bind the adapted functions by name into other modules
at import time (`from .modeling import get_max_memory`,
`from .integrations.accelerate import _get_device_map`), so patching after the
fact would have to chase every copy. A small `sys.meta_path` finder
(`_install.py`) instead runs the original loader of exactly the defining
modules (each module's `TARGETS` and `CLASS_PATCHES`) and wraps the functions
right after each module executes, before anything else can import them by
name. The finder only installs itself if one of the adapted libraries is
findable, and costs one dict lookup per import. Adaptations 5, 7, 10, 13, 14 and 15
patch the classes `PreTrainedModel` (its `to`, `neuron`, `from_pretrained` and
`get_compiled_call`), `Trainer` (its RNG checkpointing), TRL's configs
(their `__post_init__`), JetMoe's `JetMoeTopKGating` and
`JetMoeParallelExperts` (their `forward`) and `DeferredStopCheck` (its
`is_supported` and `__init__`) in place, so they have no copies to
chase. If a target module is already imported when
torchneuron is (unusual: `import torch` autoloads torchneuron first), it is
patched at once and the already bound copies in the other loaded modules of
those libraries are replaced too. A target that is itself the first to import
torch (e.g. `from transformers import PreTrainedModel` before `import torch`)
is still half-executed then; it is patched, copies included, at the next import
of any module after it finishes. Everything is idempotent; a target function
missing in some future version gives a warning instead of an error.
"""
from ._common import neuron_is_accelerator
from ._install import install
from ._transformers_models import name_architecture_in_errors

__all__ = ["install", "name_architecture_in_errors", "neuron_is_accelerator"]

install()
