// Scaled dot-product attention on raw buffers (flash-style: tiles of keys
// with an online softmax, never the full score matrix), forward and
// backward. Serves prefill and decode against a static KV cache alike:
// blocks of keys that the causal rule or the mask hide entirely are skipped
// without reading the keys, which is what makes decode against a mostly
// empty cache cheap.
#pragma once

#include "neuronkernels/types.hpp"

namespace neuronkernels {

struct AttentionParams {
  View4 q;     // [B, Hq, L, D]
  View4 k;     // [B, Hkv, S, D]; Hq % Hkv == 0 (grouped-query attention)
  View4 v;     // [B, Hkv, S, Dv]
  View4 mask;  // additive, viewed as [B, Hq, L, S] (stride 0 where broadcast); data null if none
  bool causal = false;  // row i sees keys j <= i (top-left aligned, like PyTorch)
  float scale = 1.0f;
};

// out: [B, Hq, L, Dv] in q's dtype. lse (may be null): [B, Hq, L] float32,
// contiguous, the log-sum-exp of each row's scaled scores (-inf for a row
// that sees no key; its output is zero).
void attention_forward(const AttentionParams& p, const View4& out, float* lse,
                       const ParallelFor& parallel_for = serial_for);

struct AttentionGrads {
  View4 dq;  // like q (data null: not wanted)
  View4 dk;  // like k (data null: not wanted)
  View4 dv;  // like v (data null: not wanted)
  // [B, Hq, L, S] float32, contiguous, zero-filled by the caller (null: not
  // wanted). Receives the gradient of the scores, i.e. of an additive mask.
  float* dscores = nullptr;
};

// Gradients of attention_forward given its out and lse, and grad_out (like out).
void attention_backward(const AttentionParams& p, const View4& out, const float* lse,
                        const View4& grad_out, const AttentionGrads& grads,
                        const ParallelFor& parallel_for = serial_for);

}  // namespace neuronkernels
