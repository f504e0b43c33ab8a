#include "csrc/aten/native/UpcastGemm.h"

#include <dlfcn.h>

#include <climits>
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include "csrc/aten/native/Bf16Brgemm.h"
#include "csrc/aten/native/OneDnnGemm.h"
#include "neuronkernels/isa.hpp"

namespace torchneuron::native {
namespace {

// MKL's CBLAS enums and its LP64 integer (the MKL linked into libtorch_cpu).
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
using MklGemmBf16 = void (*)(int layout, int transa, int transb, int m, int n, int k, float alpha,
                             const uint16_t* a, int lda, const uint16_t* b, int ldb, float beta, float* c, int ldc);

// Looked up once per process; null without it (the fallback runs).
MklGemmBf16 mkl_gemm_bf16() {
  static const auto gemm = reinterpret_cast<MklGemmBf16>(dlsym(RTLD_DEFAULT, "cblas_gemm_bf16bf16f32"));
  return gemm;
}

// A row-major operand for CBLAS: transposed or not, and its leading dimension.
struct Operand {
  int trans = kNoTrans;
  int64_t ld = 0;
};

bool as_operand(const at::Tensor& t, Operand* o) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(cols, 1)) {
    *o = {kNoTrans, t.stride(0)};
    return true;
  }
  if (t.stride(0) == 1 && t.stride(1) >= std::max<int64_t>(rows, 1)) {
    *o = {kTrans, t.stride(1)};
    return true;
  }
  return false;
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

bool upcast_gemm_uses_mkl() {
  // MKL picks its code by CPU vendor (on AMD CPUs it ran its AVX2 float32
  // kernels, OneDnnGemm.cpp): its bfloat16 GEMM is taken on Intel CPUs only,
  // where it was measured; elsewhere the graph's own casts and GEMM run.
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return mkl_gemm_bf16() != nullptr && intel && neuronkernels::isa() == neuronkernels::Isa::kAvx512Bf16;
}

bool upcast_gemm_is_mixed_precision() { return upcast_gemm_uses_mkl() || bf16_brgemm_available(); }

void upcast_addmm_here(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, const at::Tensor* C,
                       float beta, float alpha) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  const bool with_c = C != nullptr && beta != 0.0f;
  const int64_t M = Y.size(0), N = Y.size(1), K = A.size(1);
  Operand a, b;
  if (upcast_gemm_uses_mkl() && as_operand(A, &a) && as_operand(B, &b) && Y.stride(1) == 1 &&
      Y.stride(0) >= std::max<int64_t>(N, 1) && fits_int(M) && fits_int(N) && fits_int(K) && fits_int(a.ld) &&
      fits_int(b.ld) && fits_int(Y.stride(0))) {
    if (with_c && !C->is_same(Y)) Y.copy_(C->expand(Y.sizes()));
    if (M == 0 || N == 0) return;
    if (K == 0 || alpha == 0.0f) {  // as addmm: Y = beta * C (0 without C)
      if (!with_c) {
        Y.zero_();
      } else if (beta != 1.0f) {
        Y.mul_(beta);
      }
      return;
    }
    mkl_gemm_bf16()(kRowMajor, a.trans, b.trans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha,
         static_cast<const uint16_t*>(A.const_data_ptr()), static_cast<int>(a.ld),
         static_cast<const uint16_t*>(B.const_data_ptr()), static_cast<int>(b.ld), with_c ? beta : 0.0f,
         Y.mutable_data_ptr<float>(), static_cast<int>(Y.stride(0)));
    return;
  }
  if (alpha == 1.0f && Y.stride(1) == 1 && (M <= 1 || Y.stride(0) >= N) && bf16_brgemm_available()) {
    if (with_c && !C->is_same(Y)) Y.copy_(C->expand(Y.sizes()));
    if (with_c && beta != 1.0f) Y.mul_(beta);
    bf16_brgemm(A, B, Y, /*accumulate=*/with_c);
    return;
  }
  // The graph's own arithmetic: the operands cast to float32, then the
  // float32 GEMM the device's eager products use (OneDnnGemm.h's policy:
  // oneDNN where it is chosen, ATen's otherwise).
  const at::Tensor a32 = A.to(at::kFloat), b32 = B.to(at::kFloat);
  if (float32_gemm_uses_onednn(M, K, N) && onednn_writes_into(Y)) {
    if (with_c && !C->is_same(Y)) Y.copy_(C->expand(Y.sizes()));
    onednn_gemm(a32, b32, Y, with_c ? beta : 0.0f, alpha);
    return;
  }
  if (with_c) {
    at::addmm_out(const_cast<at::Tensor&>(Y), *C, a32, b32, beta, alpha);
  } else {
    at::mm_out(const_cast<at::Tensor&>(Y), a32, b32);
    if (alpha != 1.0f) Y.mul_(alpha);
  }
}

}  // namespace torchneuron::native
