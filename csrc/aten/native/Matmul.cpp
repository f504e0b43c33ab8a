#include "csrc/aten/native/Matmul.h"

#include <algorithm>

#include <ATen/Context.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <neuronkernels/matmul.hpp>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/aten/native/KernelSupport.h"
#include "csrc/aten/native/OneDnnGemm.h"

namespace torchneuron::native {
namespace {

namespace nk = neuronkernels;

bool is_plain_neuron(const at::Tensor& t, const at::Tensor& like) { return is_plain_on(t, like, like.scalar_type()); }

nk::View2 view_of(const at::Tensor& t, nk::DType dtype) {
  return {t.data_ptr(), dtype, t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

// Whether ATen's CPU matmul of one 16-bit row by an nn.Linear weight is its
// reduced-precision gemv: a float32-accumulated dot product per output,
// parallel over the outputs, which reads the weight at the memory's
// bandwidth as the skinny matmul does (0.71-1.07x ours over runs on AMD Zen
// 4, at AVX-512 and AVX2). ATen takes that path unless oneDNN takes the
// product: when the user leaves oneDNN enabled and it supports the type on
// this CPU (bfloat16 with AVX-512, float16 with AVX512-FP16 or AMX, as
// `torch.ops.mkldnn._is_mkldnn_*_supported` say). There oneDNN's GEMM reads
// at about half the bandwidth and the skinny matmul wins (1.3-1.5x).
// Whether oneDNN supports this 16-bit type on this CPU, as ATen answers it
// (`torch.ops.mkldnn._is_mkldnn_*_supported`); asked once per process.
bool onednn_supports(nk::DType dtype) {
  auto supported = [](const char* op) {
    const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(op, "");
    return handle.typed<bool()>().call();
  };
  static const bool bf16 = supported("mkldnn::_is_mkldnn_bf16_supported");
  static const bool fp16 = supported("mkldnn::_is_mkldnn_fp16_supported");
  return dtype == nk::DType::kBFloat16 ? bf16 : fp16;
}

bool aten_has_bandwidth_gemv(nk::DType dtype) {
  const bool onednn = at::globalContext().userEnabledMkldnn() && onednn_supports(dtype);
  return dtype != nk::DType::kFloat32 && !onednn;
}

// Whether ATen's CPU matmul of bfloat16 runs on AMX tiles: oneDNN, left
// enabled by the user, on a CPU with AMX-BF16 (oneDNN asks the OS for the
// tiles itself). From 4 rows on they multiply faster than the skinny matmul
// streams the weight. Measured on an Intel Xeon with AMX (benchmarks/linear.py,
// 768 x 2048): the kernel against CPU at 3, 4, 8 and 16 rows 1.09x, 0.99x,
// 0.88x, 0.49x; compiled batch-8 bfloat16 decoding 283 -> 384 tokens/s with
// those products on oneDNN (docs/performance.md).
bool aten_has_amx_bf16_gemm() {
  static const bool amx = __builtin_cpu_supports("amx-bf16") && onednn_supports(nk::DType::kBFloat16);
  return amx && at::globalContext().userEnabledMkldnn();
}
constexpr int64_t kAmxMinRows = 4;

// The kernel's arguments when it takes these operands (2-D, one floating
// dtype on one neuron device, few rows, row-contiguous x, w contiguous along
// either dimension, bias broadcasting to the output, and not a case ATen
// runs as fast); otherwise nothing, and the general path (ATen's CPU kernel on
// the device buffers, with ATen's checks and messages) runs.
}  // namespace

std::optional<nk::SkinnyMatmulParams> skinny_matmul_params(const at::Tensor& x, const at::Tensor& w,
                                                           const at::Tensor* bias) {
  if (x.dim() != 2 || w.dim() != 2 || !x.is_privateuseone()) return std::nullopt;
  const auto dtype = kernel_dtype(x.scalar_type());
  if (!dtype || !is_plain_neuron(x, x) || !is_plain_neuron(w, x)) return std::nullopt;
  const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
  if (!skinny_matmul_takes_rows(x.scalar_type(), M) || N < 1 || w.size(0) != K) return std::nullopt;
  if (x.stride(1) != 1 && K > 1) return std::nullopt;
  if (w.stride(0) != 1 && w.stride(1) != 1) return std::nullopt;
  // One 16-bit row by an nn.Linear weight: ATen's gemv is as fast (above),
  // and a kernel of our own runs only where it wins.
  if (M == 1 && w.stride(0) == 1 && K > 1 && aten_has_bandwidth_gemv(*dtype)) return std::nullopt;
  nk::SkinnyMatmulParams p;
  p.x = view_of(x, *dtype);
  p.w = view_of(w, *dtype);
  if (bias) {
    if (!is_plain_neuron(*bias, x) || bias->dim() > 2 || !at::is_expandable_to(bias->sizes(), {M, N})) {
      return std::nullopt;
    }
    p.bias = view_of(bias->expand({M, N}), *dtype);
  }
  p.y.dtype = *dtype;
  p.y.rows = M;
  p.y.cols = N;
  p.y.row_stride = N;
  p.y.col_stride = 1;
  if (!nk::skinny_matmul_supports(p)) return std::nullopt;
  return p;
}

bool skinny_matmul_takes_rows(c10::ScalarType type, int64_t rows) {
  const auto dtype = kernel_dtype(type);
  if (!dtype || rows < 1 || rows > nk::kSkinnyMaxRows) return false;
  return !(*dtype == nk::DType::kBFloat16 && rows >= kAmxMinRows && aten_has_amx_bf16_gemm());
}

void run_skinny_matmul_here(const nk::SkinnyMatmulParams& p) {
  nk::skinny_matmul(p, kernel_parallel_for(p.y.rows * p.y.cols * p.x.cols));
}

namespace {

// Queues the kernel into a fresh [M, N] output.
at::Tensor run_skinny(const char* op, nk::SkinnyMatmulParams p, const at::Tensor& x,
                      const at::Tensor& w, const at::Tensor* bias) {
  const int64_t M = p.y.rows, N = p.y.cols;
  at::Tensor y = empty_dense(x.device().index(), {M, N}, {N, 1}, x.dtype());
  p.y.data = y.data_ptr();
  at::Tensor none;
  launch(x.device().index(), op,
         [p, keep = storages_to_keep({&x, &w, bias ? bias : &none, &y})]() { run_skinny_matmul_here(p); });
  return y;
}

bool is_one(const at::Scalar& s) {
  if (s.isComplex()) return false;
  return s.isIntegral(/*includeBool=*/false) ? s.toLong() == 1 : s.toDouble() == 1.0;
}

// Queues out = [beta * bias +] alpha * (a @ b) through oneDNN when
// onednn_takes the operands and `out` (a fresh output when undefined) is an
// [M, N] float32 tensor of their device that oneDNN writes into
// (onednn_writes_into) and that shares no memory with them; false otherwise
// (the caller takes ATen's path).
bool run_onednn(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias,
                const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (beta.isComplex() || alpha.isComplex() || !onednn_takes(a, b, bias)) return false;
  const int64_t M = a.size(0), N = b.size(1);
  if (out.defined()) {
    if (!is_plain_neuron(out, a) || out.dim() != 2 || out.size(0) != M || out.size(1) != N || !onednn_writes_into(out) ||
        out.is_alias_of(a) || out.is_alias_of(b)) {
      return false;
    }
  } else {
    out = empty_dense(a.device().index(), {M, N}, {N, 1}, a.dtype());
  }
  const float beta_f = static_cast<float>(beta.toDouble()), alpha_f = static_cast<float>(alpha.toDouble());
  // ATen's addmm ignores the bias when beta is 0 (its NaNs too); addmm_'s bias is the output itself.
  const bool use_bias = bias != nullptr && beta_f != 0.0f;
  return queue_product(op, a, b, use_bias ? bias : nullptr, beta_f, alpha_f, out, run_onednn_here);
}

// Queues out = [beta * bias +] alpha * (a @ b) for batches of float32
// matrices ([B, M, K] @ [B, K, N], a bias broadcasting to [B, M, N]) through
// oneDNN, into a fresh contiguous output, when the policy and the size allow
// it (eager attention's scores and values: MKL runs its AVX2 code there too);
// false otherwise.
bool run_onednn_batched(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias,
                        const at::Scalar& beta, const at::Scalar& alpha, at::Tensor& out) {
  if (beta.isComplex() || alpha.isComplex() || !onednn_takes_batched(a, b, bias)) return false;
  const int64_t batch = a.size(0), M = a.size(1), N = b.size(2);
  out = empty_dense(a.device().index(), {batch, M, N}, {M * N, N, 1}, a.dtype());
  const float beta_f = static_cast<float>(beta.toDouble()), alpha_f = static_cast<float>(alpha.toDouble());
  at::Tensor A = queued_alias(a), B = queued_alias(b), Y = queued_alias(out);
  // as ATen's baddbmm: with beta 0 the bias is not read (its NaNs neither)
  at::Tensor C = bias != nullptr && beta_f != 0.0f ? queued_alias(*bias) : at::Tensor();
  launch_cpu_kernels(a.device().index(), op, std::max({a.numel(), b.numel(), out.numel()}), /*matrix=*/true,
                     [A, B, Y, C, beta_f, alpha_f]() {
                       run_onednn_here(A, B, Y, C.defined() ? &C : nullptr, beta_f, alpha_f);
                     });
  return true;
}

}  // namespace

bool is_plain_on(const at::Tensor& t, const at::Tensor& like, at::ScalarType dtype) {
  return t.device() == like.device() && t.scalar_type() == dtype && t.layout() == at::kStrided && !t.is_conj() &&
         !t.is_neg();
}

bool queue_product(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias, float beta,
                   float alpha, const at::Tensor& out, ProductRunner run) {
  const bool bias_is_out = bias != nullptr && bias->is_same(out);
  if (bias != nullptr && !bias_is_out && bias->is_alias_of(out)) return false;
  at::Tensor A = queued_alias(a), B = queued_alias(b), Y = queued_alias(out);
  at::Tensor C = bias != nullptr && !bias_is_out ? queued_alias(*bias) : at::Tensor();
  launch_cpu_kernels(a.device().index(), op, std::max({a.numel(), b.numel(), out.numel()}), /*matrix=*/true,
                     [A, B, Y, C, bias_is_out, beta, alpha, run]() {
                       run(A, B, Y, C.defined() ? &C : (bias_is_out ? &Y : nullptr), beta, alpha);
                     });
  return true;
}

bool onednn_takes(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias) {
  if (a.dim() != 2 || b.dim() != 2 || !a.is_privateuseone() || a.scalar_type() != at::kFloat) return false;
  if (!is_plain_neuron(a, a) || !is_plain_neuron(b, a) || a.size(1) != b.size(0)) return false;
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (bias != nullptr && (!is_plain_neuron(*bias, a) || bias->dim() > 2 || !at::is_expandable_to(bias->sizes(), {M, N}))) {
    return false;
  }
  return float32_gemm_uses_onednn(M, K, N);
}

bool onednn_takes_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias) {
  if (a.dim() != 3 || b.dim() != 3 || !a.is_privateuseone() || a.scalar_type() != at::kFloat) return false;
  if (!is_plain_neuron(a, a) || !is_plain_neuron(b, a)) return false;
  const int64_t batch = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  if (b.size(0) != batch || b.size(1) != K) return false;
  if (bias != nullptr &&
      (!is_plain_neuron(*bias, a) || bias->dim() > 3 || !at::is_expandable_to(bias->sizes(), {batch, M, N}))) {
    return false;
  }
  return float32_gemm_uses_onednn(batch * M, K, N);
}

void run_onednn_here(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, const at::Tensor* C, float beta,
                     float alpha) {
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  if (C != nullptr && !C->is_same(Y)) Y.copy_(C->expand(Y.sizes()));
  if (alpha == 0.0f) {  // oneDNN's matmul returns without writing; BLAS reads neither operand
    if (C == nullptr) {
      Y.zero_();
    } else if (beta != 1.0f) {
      Y.mul_(beta);
    }
    return;
  }
  onednn_gemm(A, B, Y, C != nullptr ? beta : 0.0f, alpha);
}

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
  static OpCounter& counter = op_counter("aten::mm");
  if (auto p = skinny_matmul_params(self, mat2, nullptr)) {
    at::Tensor y = run_skinny("aten::mm", *p, self, mat2, nullptr);
    counter.count(ExecPath::kKernel);
    return y;
  }
  if (at::Tensor y; run_onednn("aten::mm", self, mat2, nullptr, 0, 1, y)) {
    counter.count(ExecPath::kKernel);
    return y;
  }
  return call_fallback(handle, self, mat2).back().toTensor();
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::addmm", "");
  static OpCounter& counter = op_counter("aten::addmm");
  if (is_one(beta) && is_one(alpha)) {
    if (auto p = skinny_matmul_params(mat1, mat2, &self)) {
      at::Tensor y = run_skinny("aten::addmm", *p, mat1, mat2, &self);
      counter.count(ExecPath::kKernel);
      return y;
    }
  }
  if (at::Tensor y; run_onednn("aten::addmm", mat1, mat2, &self, beta, alpha, y)) {
    counter.count(ExecPath::kKernel);
    return y;
  }
  return call_fallback(handle, self, mat1, mat2, beta, alpha).back().toTensor();
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "out");
  static OpCounter& counter = op_counter("aten::mm.out");
  if (run_onednn("aten::mm.out", self, mat2, nullptr, 0, 1, out)) {
    counter.count(ExecPath::kKernel);
    return out;
  }
  call_fallback(handle, self, mat2, out);
  return out;
}

at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::addmm", "out");
  static OpCounter& counter = op_counter("aten::addmm.out");
  if (run_onednn("aten::addmm.out", mat1, mat2, &self, beta, alpha, out)) {
    counter.count(ExecPath::kKernel);
    return out;
  }
  call_fallback(handle, self, mat1, mat2, beta, alpha, out);
  return out;
}

at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::addmm_", "");
  static OpCounter& counter = op_counter("aten::addmm_");
  if (run_onednn("aten::addmm_", mat1, mat2, &self, beta, alpha, self)) {
    counter.count(ExecPath::kKernel);
    return self;
  }
  call_fallback(handle, self, mat1, mat2, beta, alpha);
  return self;
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::bmm", "");
  static OpCounter& counter = op_counter("aten::bmm");
  if (at::Tensor y; run_onednn_batched("aten::bmm", self, mat2, nullptr, 0, 1, y)) {
    counter.count(ExecPath::kKernel);
    return y;
  }
  return call_fallback(handle, self, mat2).back().toTensor();
}

at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                   const at::Scalar& beta, const at::Scalar& alpha) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::baddbmm", "");
  static OpCounter& counter = op_counter("aten::baddbmm");
  if (at::Tensor y; run_onednn_batched("aten::baddbmm", batch1, batch2, &self, beta, alpha, y)) {
    counter.count(ExecPath::kKernel);
    return y;
  }
  return call_fallback(handle, self, batch1, batch2, beta, alpha).back().toTensor();
}

}  // namespace torchneuron::native
