// Float32 matrix products through oneDNN where ATen's MKL path is slow.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace torchneuron::native {

// Products of at least this many multiply-adds are worth oneDNN's call
// overhead (measured on AMD EPYC Zen 5: below about 4M it matched or lost to
// MKL's sgemm; above, 1.8-2.6x faster).
constexpr int64_t kOneDnnMinMacs = int64_t{1} << 22;

// Whether a float32 [m, k] x [k, n] product runs through oneDNN: the
// TORCHNEURON_FLOAT32_GEMM policy allows it (docs/env-vars.md), ATen has
// oneDNN (and the user left it enabled), and the product is large enough.
bool float32_gemm_uses_onednn(int64_t m, int64_t k, int64_t n);

// out = beta * out + alpha * (a @ b) through oneDNN's matmul, on CPU tensors
// (aliases of device buffers, inside queued work): a [m, k], b [k, n] float32
// in any strides (or batches of them: [batch, m, k] and [batch, k, n]), out
// [m, n] (or [batch, m, n]) float32 as onednn_writes_into takes it. Only
// after float32_gemm_uses_onednn said yes.
void onednn_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, float beta, float alpha);

// Whether oneDNN writes a product straight into `out`: a 2-D tensor whose
// rows are dense and do not overlap, contiguous or a row tile of a wider
// buffer (TRL's chunked log-probabilities write each vocabulary chunk of the
// LM head's product into such a tile); a batch of them (3-D) contiguous.
bool onednn_writes_into(const at::Tensor& out);

// The policy in force, for tests and benchmarks: "onednn" or "aten".
const char* float32_gemm_library();

}  // namespace torchneuron::native
