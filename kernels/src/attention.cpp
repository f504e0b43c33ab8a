// Argument checks and the choice of instruction set for the attention kernels.
#include <sstream>

#include "attention_impl.hpp"
#include "neuronkernels/isa.hpp"

namespace neuronkernels {
namespace {

[[noreturn]] void fail(const std::string& what) { throw KernelError("attention: " + what); }

std::string shape(const View4& v) {
  std::ostringstream s;
  s << "[" << v.sizes[0] << ", " << v.sizes[1] << ", " << v.sizes[2] << ", " << v.sizes[3] << "]";
  return s.str();
}

void check(const AttentionParams& p) {
  const auto &q = p.q.sizes, &k = p.k.sizes, &v = p.v.sizes;
  if (q[0] != k[0] || k[0] != v[0]) fail("batch sizes differ: q " + shape(p.q) + ", k " + shape(p.k) + ", v " + shape(p.v));
  if (k[1] != v[1] || k[2] != v[2]) fail("k " + shape(p.k) + " and v " + shape(p.v) + " differ in heads or length");
  if (q[3] != k[3]) fail("q " + shape(p.q) + " and k " + shape(p.k) + " differ in head size");
  if (k[1] == 0 ? q[1] != 0 : q[1] % k[1] != 0) {
    fail("query heads (" + std::to_string(q[1]) + ") must be a multiple of key/value heads (" +
         std::to_string(k[1]) + ")");
  }
  if (p.k.dtype != p.q.dtype || p.v.dtype != p.q.dtype) fail("q, k and v must have one dtype");
  if (p.mask.data) {
    const auto& m = p.mask.sizes;
    if (m[0] != q[0] || m[1] != q[1] || m[2] != q[2] || m[3] != k[2]) {
      fail("mask " + shape(p.mask) + " must be viewed as [B, Hq, L, S] = [" + std::to_string(q[0]) +
           ", " + std::to_string(q[1]) + ", " + std::to_string(q[2]) + ", " + std::to_string(k[2]) + "]");
    }
  }
}

}  // namespace

void attention_forward(const AttentionParams& p, const View4& out, float* lse,
                       const ParallelFor& parallel_for) {
  check(p);
  if (out.sizes[0] != p.q.sizes[0] || out.sizes[1] != p.q.sizes[1] ||
      out.sizes[2] != p.q.sizes[2] || out.sizes[3] != p.v.sizes[3]) {
    fail("out " + shape(out) + " must be [B, Hq, L, Dv]");
  }
  switch (isa()) {
    case Isa::kAvx512Bf16:  // attention has no bfloat16 dot products
    case Isa::kAvx512: return isa_avx512::forward(p, out, lse, parallel_for);
    case Isa::kAvx2: return isa_avx2::forward(p, out, lse, parallel_for);
    case Isa::kBaseline: return isa_baseline::forward(p, out, lse, parallel_for);
  }
}

void attention_backward(const AttentionParams& p, const View4& out, const float* lse,
                        const View4& grad_out, const AttentionGrads& grads,
                        const ParallelFor& parallel_for) {
  check(p);
  const bool has_rows = p.q.sizes[0] * p.q.sizes[1] * p.q.sizes[2] > 0;
  if (!lse && has_rows) fail("backward needs the forward's log-sum-exp");
  if (grad_out.sizes != out.sizes) fail("grad_out " + shape(grad_out) + " differs from out " + shape(out));
  switch (isa()) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512: return isa_avx512::backward(p, out, lse, grad_out, grads, parallel_for);
    case Isa::kAvx2: return isa_avx2::backward(p, out, lse, grad_out, grads, parallel_for);
    case Isa::kBaseline: return isa_baseline::backward(p, out, lse, grad_out, grads, parallel_for);
  }
}

}  // namespace neuronkernels
