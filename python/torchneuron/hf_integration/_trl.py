"""TRL adaptations (13, 16, 17). Checked against trl 1.16.0.

13. `pad_to_multiple_of="auto"` of TRL's trainer configs (`SFTConfig`,
   `DPOConfig`, `KTOConfig`, `RewardConfig`, `GRPOConfig`, `RLOOConfig`,
   `DistillationConfig`, each in its `__post_init__`)
   TRL resolves its default "auto" to 128 when `args.device.type == "neuron"`
   ("Neuron compiles once per input shape, so padding bounds the number of
   compilations": AWS's devices run every step as a graph compiled for its
   shapes) and to None (no padding) on every other device. torchneuron runs
   eagerly, so the padding only adds work: a chat dataset of 27-token rows was
   padded to 128 tokens, and SFT took 5x the time per step and 4x the peak
   memory (batches of 64 rows). When "auto" met torchneuron's `neuron`
   device, the wrapper resolves it as TRL does on the other devices: None.
   With `torch_compile=True` TRL's 128 stays, for the reason TRL gives (the
   backend "neuron" compiles static shapes). An explicit value is kept.

16. `trl.trainer.utils._ChunkedLogProbFunction` (TRL's fused LM head: the
   per-token log-probabilities, entropy and top-1 flags of every trainer's
   loss, `add_fused_lm_head`)
   Dynamo cannot trace its forward: it writes each vocabulary tile with
   `torch.mm(..., out=tile)` into a slice of a wider buffer, and Dynamo refuses
   a non-contiguous `out=` (a graph break); inside its loops that break makes
   Dynamo skip the whole function. So under `torch_compile=True` the LM head,
   the loss and their backward ran eagerly between compiled graphs: in the
   SFT benchmark (benchmarks/train.py, a 32000-token vocabulary) a sixth of
   the step's device time. While Dynamo traces tensors on a neuron device, the
   wrapper calls the function through `torch._dynamo.allow_in_graph`:
   AOTAutograd then traces its forward and its own backward as they run
   (functionalized, loops unrolled), so they compile into the model's graphs
   with TRL's arithmetic unchanged. Elsewhere, and always eagerly, the
   original `apply` runs (on CUDA and XPU it launches Triton kernels, which
   cannot be traced this way).

17. `trl.kernels.chunked_logprob._addmm_fp32` (the fused LM head's backward:
   `acc += a @ b` into float32 accumulators, from bfloat16 tiles under
   autocast)
   TRL runs it as one product with float32 accumulation,
   `torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)`, on CUDA only;
   elsewhere `acc.addmm_(a.float(), b.float())` writes float32 copies of both
   operands (a [tokens, vocabulary] tile, one of them transposed, and the
   [vocabulary, hidden] weight) and multiplies at float32 speed. neuron has
   the out_dtype product (a mixed-precision GEMM where the CPU has one,
   csrc/aten/native/UpcastGemm.h; the casts and the float32 product
   otherwise), so on neuron tensors the wrapper takes TRL's CUDA form. The
   products of bfloat16 values are exact in float32 either way: only the
   order of the sums differs. Under torch.compile TRL's own form stays (the
   compiler joins its casts and product into the same GEMM).
"""
import functools
import types

from ._common import PATCHED_ATTR, classes_to_adapt, neuron_is_accelerator

# module -> the config class it defines
_CONFIGS = {
    "trl.trainer.sft_config": "SFTConfig",
    "trl.trainer.dpo_config": "DPOConfig",
    "trl.trainer.kto_config": "KTOConfig",
    "trl.trainer.reward_config": "RewardConfig",
    "trl.trainer.grpo_config": "GRPOConfig",
    "trl.trainer.rloo_config": "RLOOConfig",
    "trl.trainer.distillation_config": "DistillationConfig",
}


def _patch_config(module):
    name = _CONFIGS[module.__name__]
    found = classes_to_adapt(module, (name,), "its pad_to_multiple_of default may pad every batch to 128 "
                             "tokens on neuron", members=("__post_init__",))
    if found is None:
        return
    (cls,) = found
    original = cls.__post_init__

    @functools.wraps(original)
    def __post_init__(self):
        auto = self.pad_to_multiple_of == "auto"
        original(self)
        if (auto and self.pad_to_multiple_of is not None and not self.torch_compile
                and self.device.type == "neuron" and neuron_is_accelerator()):
            self.pad_to_multiple_of = None

    cls.__post_init__ = __post_init__
    setattr(cls, PATCHED_ATTR, True)


def _wrap_chunked_logprob(function, module):
    import torch

    @torch._dynamo.allow_in_graph
    def chunked_logprob_in_graph(*args):
        return function.apply(*args)

    def apply(hidden, *args):
        if torch.compiler.is_compiling() and hidden.device.type == "neuron":
            return chunked_logprob_in_graph(hidden, *args)
        return function.apply(hidden, *args)

    # Callers use only `.apply` (an autograd.Function's entry point).
    return types.SimpleNamespace(apply=apply, function=function)


def _wrap_addmm_fp32(function, module):
    import torch

    @functools.wraps(function)
    def _addmm_fp32(acc, a, b):
        if (acc.device.type == "neuron" and a.dtype in (torch.float16, torch.bfloat16) and b.dtype == a.dtype
                and not torch.compiler.is_compiling()):
            torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
        else:
            function(acc, a, b)

    return _addmm_fp32


CLASS_PATCHES = {module: [_patch_config] for module in _CONFIGS}
TARGETS = {"trl.trainer.utils": [("_ChunkedLogProbFunction", _wrap_chunked_logprob)],
           "trl.kernels.chunked_logprob": [("_addmm_fp32", _wrap_addmm_fp32)]}
