"""The decomposition table of the neuron backend.

AOTAutograd lowers each graph to ATen ops; a decomposition table says which
ops it breaks into smaller ones. We start from PyTorch's core-ATen table (the
op set every backend is expected to take) and keep whole the ops the graph
compiler fuses into one device kernel, or runs as one library call: breaking
them up would only make the compiler pattern-match them back together.

Kept whole (removed from the core-ATen table), and why:

| ops | the kernel they become |
| --- | --- |
| `softmax`, `log_softmax`, `_safe_softmax` and their backwards | the softmax kernel (one pass over a row) |
| `native_layer_norm_backward`, `rms_norm`, `_fused_rms_norm` (+ backward) | the norm kernels |
| `scaled_dot_product_attention` | the device's attention (it picks the overrideable fused op) |
| `embedding_dense_backward` | the embedding kernel's scatter-add |
| `silu`, `gelu_` and their backwards, `tanh_backward`, `sigmoid_backward` | activation epilogues of the GEMM (SwiGLU/GeGLU) |
| `nll_loss_forward`/`_backward` | the fused cross-entropy kernel |
| `addcmul`, `addcdiv` | fused groups computing `self + value * (t1 op t2)` as eager's CPU kernel does (PyTorch's decomposition is `prims.fma`, which has no tile op: an extern call that took 4.3 ms where eager took 0.7) |

Never in the table, so kept anyway: `addmm`, `mm`, `bmm` (the GEMM and the
skinny matmul), `native_layer_norm`, `embedding`, `_softmax`,
`_log_softmax`, `native_dropout` (one RNG draw from the device generator).

Added: `histc` of an integer tensor counts through a floating copy and returns
the input's dtype, as the device's eager `histc` does (and CUDA's; ATen's CPU
kernel, which a program's extern call runs, takes floating types only).
Transformers' mixture-of-experts layers count tokens per expert so on any
device but CPU. And `mm`, `addmm`, `bmm` and `baddbmm` with an `out_dtype`
(float32 products of 16-bit operands, as CUDA has them) become their operands
cast to out_dtype and the plain product, as the device's eager kernels compute
them (csrc/aten/native/OutDtypeProducts.h): ATen has no CPU kernel for an
extern call, and the compiler's pattern pass joins casts and product again
where the target has a mixed-precision GEMM.

Also added: PyTorch's elementwise foreach ops (a compiled optimizer step) as their
element op per tensor, which the compiler fuses per parameter
(foreach_decompositions.py).

Everything else follows the core-ATen table: composite ops (`linear`,
`layer_norm`, ...) arrive as their ATen pieces, in-place ops as functional
ones (AOTAutograd functionalizes), and the rest as core ATen ops.
"""
import functools

import torch

from .foreach_decompositions import foreach_decompositions

aten = torch.ops.aten

# Packets (every overload) kept whole; see the table above.
KEPT_WHOLE = (
    aten.softmax, aten.log_softmax, aten._safe_softmax,
    aten._softmax_backward_data, aten._log_softmax_backward_data,
    aten.native_layer_norm_backward, aten.rms_norm, aten._fused_rms_norm, aten._fused_rms_norm_backward,
    aten.scaled_dot_product_attention,
    aten.embedding_dense_backward,
    aten.silu, aten.silu_, aten.silu_backward, aten.gelu_, aten.gelu_backward,
    aten.tanh_backward, aten.sigmoid_backward,
    aten.nll_loss_forward, aten.nll_loss_backward,
    aten.addcmul, aten.addcmul_, aten.addcdiv, aten.addcdiv_,
)


def _integer_histc(self, bins=100, min=0, max=0):
    if self.dtype.is_floating_point:
        return NotImplemented  # the op itself
    # Exact in float32 up to 2^24 elements per bin (csrc/aten/native/Compat.cpp).
    counting = torch.float32 if self.numel() < (1 << 24) else torch.float64
    return aten.histc.default(self.to(counting), bins, min, max).to(self.dtype)


def _mm_dtype(self, mat2, out_dtype):
    return aten.mm.default(self.to(out_dtype), mat2.to(out_dtype))


def _bmm_dtype(self, mat2, out_dtype):
    return aten.bmm.default(self.to(out_dtype), mat2.to(out_dtype))


def _addmm_dtype(self, mat1, mat2, out_dtype, beta=1, alpha=1):
    return aten.addmm.default(self.to(out_dtype), mat1.to(out_dtype), mat2.to(out_dtype), beta=beta, alpha=alpha)


def _baddbmm_dtype(self, batch1, batch2, out_dtype, beta=1, alpha=1):
    return aten.baddbmm.default(self.to(out_dtype), batch1.to(out_dtype), batch2.to(out_dtype), beta=beta,
                                alpha=alpha)


@functools.cache
def _table():
    from torch._decomp import core_aten_decompositions

    kept = {packet for packet in KEPT_WHOLE}
    table = {op: fn for op, fn in core_aten_decompositions().items()
             if getattr(op, "overloadpacket", None) not in kept}
    table[aten.histc.default] = _integer_histc
    table[aten.mm.dtype] = _mm_dtype
    table[aten.bmm.dtype] = _bmm_dtype
    table[aten.addmm.dtype] = _addmm_dtype
    table[aten.baddbmm.dtype] = _baddbmm_dtype
    table.update(foreach_decompositions())
    return table


def decomposition_table() -> dict:
    """A copy of the table (op overload -> decomposition)."""
    return dict(_table())
