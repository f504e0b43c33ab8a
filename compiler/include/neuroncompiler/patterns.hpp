// The pattern pass: puts native ops (native_ops.hpp: the device's own
// kernels) in place of the ATen nodes and subgraphs they compute, before
// fusion. What it recognizes:
//  - the device's fused attention, forward and backward (the op SDPA picks on
//    neuron, without dropout): the device's attention kernel, as eager runs it;
//  - native_layer_norm, and RMSNorm as Hugging Face writes it
//    (x * rsqrt(mean(x^2) + eps), optionally cast, optionally times a weight,
//    from a 16-bit x through a float32 cast or not): one row-norm kernel pass;
//  - the Llama family's rotary embedding x * cos + cat(-x2, x1) * sin: one
//    pass of the rotary kernel;
//  - scalar_tensor constants read only by pointwise nodes: immediates of
//    those nodes' tiles;
//  - mm / addmm of bfloat16 operands cast to float32: ATen's mm.dtype /
//    addmm.dtype (out_dtype float32) of the bfloat16 operands, one
//    mixed-precision GEMM (an extern call, csrc/aten/native/UpcastGemm.h),
//    where the target has one (PatternOptions);
//  - a tied embedding's weight gradient, an intermediate plus
//    embedding_dense_backward: the embedding's rows added into the
//    intermediate in place.
// A subgraph is replaced only when its intermediate values are read by
// nothing else, are not graph outputs, and the kernels take its layouts and
// types; otherwise its nodes stay as they are (fused groups, extern calls).
#pragma once

#include "neuroncompiler/ir.hpp"

namespace neuroncompiler {

struct PatternReport {
  int attention = 0, norms = 0, rope = 0;
  int upcast_matmuls = 0;  // mm / addmm of bfloat16 operands cast to float32: one mixed-precision GEMM
  int embedding_grads = 0; // x + embedding_dense_backward(...): the rows added into x in place
  int folded = 0;          // scalar_tensor constants folded into their pointwise readers
  int replaced_nodes = 0;  // graph nodes now inside native ops
};

// What the target runs well. Where it has no mixed-precision GEMM, that
// extern call would cast its operands into fresh memory per call: the casts
// stay fused groups writing planned buffers, and the float32 product stays.
struct PatternOptions {
  bool mixed_precision_gemm = true;
};

PatternReport rewrite_patterns(Graph& graph, const PatternOptions& options = {});

}  // namespace neuroncompiler
