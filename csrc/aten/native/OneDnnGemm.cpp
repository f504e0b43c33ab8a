#include "csrc/aten/native/OneDnnGemm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

namespace torchneuron::native {
namespace {

// ATen runs float32 mm/addmm through MKL's sgemm (oneDNN takes only the
// reduced-precision types, or float32 when the user allows TF32/BF32
// rounding). MKL picks its code by CPU vendor: on AMD CPUs it runs its AVX2
// kernels although the CPU has AVX-512, so a 512 x 768 x 2048 product ran at
// 140-150 GFLOP/s on an AMD EPYC Zen 5 (2 threads) where oneDNN, which picks
// by the CPU's features, ran at 250-370 with the same float32 arithmetic. So
// on such CPUs the device's float32 products go to oneDNN's matmul, through
// the function ATen itself calls for bfloat16 (at::native::mkldnn_matmul:
// exported by libtorch_cpu, but without an installed header, so it is looked
// up at run time and its absence only keeps MKL).
using MkldnnMatmul = void (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, float, float);

MkldnnMatmul find_mkldnn_matmul() {
  return reinterpret_cast<MkldnnMatmul>(dlsym(RTLD_DEFAULT, "_ZN2at6native13mkldnn_matmulERKNS_6TensorES3_S3_ff"));
}

enum class Policy { kAuto, kOneDnn, kAten };

// TORCHNEURON_FLOAT32_GEMM: auto (oneDNN on AMD CPUs with AVX-512), onednn, aten.
Policy policy_setting() {
  const char* v = std::getenv("TORCHNEURON_FLOAT32_GEMM");
  const std::string s = v == nullptr ? "" : v;
  if (s.empty() || s == "auto") return Policy::kAuto;
  if (s == "onednn") return Policy::kOneDnn;
  if (s == "aten") return Policy::kAten;
  TORCH_CHECK(false, "TORCHNEURON_FLOAT32_GEMM='", s,
              "': expected auto (oneDNN on AMD CPUs with AVX-512, where MKL runs its AVX2 code), onednn or aten");
}

// mkldnn_matmul refuses float32 on CPUs without the instructions of oneDNN's
// bfloat16 kernels (AVX-512 BW/VL/DQ or AVX-NE-CONVERT): ATen's own check of
// that, through the op it registers for it.
bool aten_onednn_takes_float32() {
  const auto op = c10::Dispatcher::singleton().findSchema({"mkldnn::_is_mkldnn_bf16_supported", ""});
  return op.has_value() && op->typed<bool()>().call();
}

bool choose_onednn() {
  static const Policy policy = policy_setting();
  static const MkldnnMatmul found = find_mkldnn_matmul();
  if (policy == Policy::kAten || found == nullptr) return false;
  const bool takes_float32 = aten_onednn_takes_float32();
  TORCH_CHECK(policy != Policy::kOneDnn || takes_float32,
              "TORCHNEURON_FLOAT32_GEMM=onednn: ATen's oneDNN matmul takes float32 only on CPUs with AVX-512 "
              "(BW, VL, DQ) or AVX-NE-CONVERT, and this CPU has neither; use auto or aten");
  if (policy == Policy::kOneDnn) return true;
  __builtin_cpu_init();
  return takes_float32 && __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512f");
}

// The choice, made once per process.
bool onednn_chosen() {
  static const bool onednn = choose_onednn();
  return onednn;
}

}  // namespace

const char* float32_gemm_library() {
  return onednn_chosen() && at::globalContext().userEnabledMkldnn() ? "onednn" : "aten";
}

bool float32_gemm_uses_onednn(int64_t m, int64_t k, int64_t n) {
  if (!onednn_chosen() || m <= 0 || k <= 0 || n <= 0) return false;
  const double macs = static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
  return macs >= static_cast<double>(kOneDnnMinMacs) && at::globalContext().userEnabledMkldnn();
}

bool onednn_writes_into(const at::Tensor& out) {
  if (out.dim() == 3) return out.is_contiguous();
  if (out.dim() != 2) return false;
  return out.is_contiguous() || (out.stride(1) == 1 && out.stride(0) >= out.size(1));
}

void onednn_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, float beta, float alpha) {
  static const MkldnnMatmul matmul = find_mkldnn_matmul();
  TORCH_INTERNAL_ASSERT(matmul != nullptr && onednn_writes_into(out));
  matmul(a, b, out, beta, alpha);
}

}  // namespace torchneuron::native
