#include "csrc/aten/native/Attention.h"

#include <cmath>
#include <string>

#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <c10/util/StringUtil.h>

#include <neuronkernels/attention.hpp>

#include "csrc/aten/DeviceTensors.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/KernelSupport.h"

namespace torchneuron::native {
namespace {

namespace nk = neuronkernels;

constexpr const char* kForwardOp = "aten::_scaled_dot_product_fused_attention_overrideable";
constexpr const char* kBackwardOp = "aten::_scaled_dot_product_fused_attention_overrideable_backward";

bool plain(const at::Tensor& t) {
  return t.layout() == at::kStrided && !t.is_nested() && !t.is_conj() && !t.is_neg();
}

// Why the kernel cannot take these tensors, or "" if it can: the one list of
// conditions behind both the backend choice and the ops' argument errors. A
// boolean mask is fine for the choice (PyTorch converts it before the op).
std::string unsupported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& mask, bool bool_mask_ok) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    return c10::str("expected 4-D query, key and value [batch, heads, length, head_dim], got ",
                    q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  }
  for (const at::Tensor* t : {&q, &k, &v}) {
    if (!on_neuron(*t) || t->device() != q.device()) {
      return c10::str("expected query, key and value on one neuron device, got ", q.device(), ", ",
                      k.device(), ", ", v.device());
    }
    if (t->scalar_type() != q.scalar_type() || !kernel_dtype(t->scalar_type())) {
      return c10::str("expected query, key and value of one dtype among float32, bfloat16, "
                      "float16, got ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
    }
    if (!plain(*t)) return "expected strided, non-nested tensors without conj/neg bits";
  }
  const int64_t B = q.size(0), Hq = q.size(1), L = q.size(2), Hkv = k.size(1), S = k.size(2);
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hkv || v.size(2) != S ||
      k.size(3) != q.size(3)) {
    return c10::str("shapes do not match: query ", q.sizes(), ", key ", k.sizes(), ", value ",
                    v.sizes());
  }
  if (Hkv > 0 ? Hq % Hkv != 0 : Hq != 0) {
    return c10::str("query heads (", Hq, ") must be a multiple of key/value heads (", Hkv, ")");
  }
  if (mask.defined()) {
    const bool dtype_ok = kernel_dtype(mask.scalar_type()) ||
                          (bool_mask_ok && mask.scalar_type() == at::kBool);
    if (mask.device() != q.device() || !dtype_ok || !plain(mask)) {
      return c10::str("expected a floating attn_bias on ", q.device(), ", got ", mask.scalar_type(),
                      " on ", mask.device());
    }
    if (mask.dim() > 4 || !at::is_expandable_to(mask.sizes(), {B, Hq, L, S})) {
      return c10::str("attn_bias of shape ", mask.sizes(), " does not broadcast to [", B, ", ",
                      Hq, ", ", L, ", ", S, "]");
    }
  }
  return "";
}

// Whether the kernel takes these arguments (else the math path runs them).
// Why the kernel cannot take a call, or "" when it can.
std::string kernel_refusal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                           bool enable_gqa) {
  if (dropout_p > 0.0) return c10::str("dropout_p=", dropout_p, " (the math path draws the mask)");
  const bool has_mask = mask && mask->defined();
  if (has_mask && is_causal) return "both attn_mask and is_causal (the math path reports it)";
  if (q.dim() == 4 && k.dim() == 4 && q.size(1) != k.size(1) && !enable_gqa) {
    return c10::str(q.size(1), " query heads and ", k.size(1), " key heads without enable_gqa");
  }
  return unsupported(q, k, v, has_mask ? *mask : at::Tensor(), /*bool_mask_ok=*/true);
}

// The backends sdpa_kernel(...) enabled that neuron does not implement.
std::string enabled_foreign_backends(const at::Context& ctx) {
  std::string names;
  auto add = [&](bool on, const char* name) {
    if (on) names += names.empty() ? name : std::string(", ") + name;
  };
  add(ctx.userEnabledFlashSDP(), "FLASH_ATTENTION");
  add(ctx.userEnabledMemEfficientSDP(), "EFFICIENT_ATTENTION");
  add(ctx.userEnabledCuDNNSDP(), "CUDNN_ATTENTION");
  return names.empty() ? "none" : names;
}

nk::View4 view_of(const at::Tensor& t) {
  nk::View4 v;
  v.data = t.data_ptr();
  v.dtype = *kernel_dtype(t.scalar_type());
  for (int i = 0; i < 4; ++i) {
    v.sizes[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  return v;
}

// Tiny problems run on the worker alone: under a few microseconds of work,
// handing out chunks costs more than it saves.
nk::ParallelFor choose_parallel_for(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return kernel_parallel_for(q.size(0) * q.size(1) * q.size(2) * k.size(2) * (k.size(3) + v.size(3)));
}

void check_arguments(const char* op, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const at::Tensor& mask) {
  const std::string why = unsupported(q, k, v, mask, /*bool_mask_ok=*/false);
  TORCH_CHECK(why.empty(), op, ": ", why);
}

nk::AttentionParams params_of(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& mask, bool is_causal, std::optional<double> scale) {
  nk::AttentionParams p;
  p.q = view_of(q);
  p.k = view_of(k);
  p.v = view_of(v);
  if (mask.defined()) p.mask = view_of(mask);
  p.causal = is_causal;
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
  return p;
}

}  // namespace

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p,
                         bool is_causal, std::optional<double> scale, bool enable_gqa) {
  auto& ctx = at::globalContext();
  const std::string refusal =
      kernel_refusal(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa);
  if (ctx.userEnabledOverrideableSDP() && refusal.empty()) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  if (ctx.userEnabledMathSDP()) return static_cast<int64_t>(at::SDPBackend::math);
  // Like CUDA when no enabled backend fits, but saying what would.
  TORCH_CHECK(ctx.userEnabledOverrideableSDP(),
              "scaled_dot_product_attention on neuron: no enabled backend runs on neuron. neuron "
              "implements SDPBackend.OVERRIDEABLE (its attention kernel) and SDPBackend.MATH; "
              "sdpa_kernel(...) enabled ", enabled_foreign_backends(ctx),
              ". Add SDPBackend.OVERRIDEABLE or SDPBackend.MATH to the backends.");
  TORCH_CHECK(false,
              "scaled_dot_product_attention on neuron: the neuron attention kernel "
              "(SDPBackend.OVERRIDEABLE) cannot take these arguments (query ", query.sizes(), " ",
              query.scalar_type(), ", key ", key.sizes(), "): ", refusal,
              "; and SDPBackend.MATH is disabled. Add SDPBackend.MATH to sdpa_kernel(...).");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
sdpa_overrideable(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal,
                  bool return_debug_mask, std::optional<double> scale) {
  static OpCounter& counter = op_counter(kForwardOp);
  at::Tensor bias = attn_bias ? *attn_bias : at::Tensor();
  check_arguments(kForwardOp, query, key, value, bias);
  TORCH_CHECK(dropout_p == 0.0, kForwardOp, ": dropout_p=", dropout_p,
              " is not supported by the neuron attention kernel (scaled_dot_product_attention "
              "sends dropout to the math backend)");
  TORCH_CHECK(!return_debug_mask, kForwardOp, ": return_debug_mask is not supported");
  TORCH_CHECK(!(is_causal && bias.defined()), kForwardOp,
              ": is_causal=True and an attn_bias cannot be combined");
  const int64_t B = query.size(0), Hq = query.size(1), L = query.size(2), S = key.size(2),
                Dv = value.size(3);
  // [B, L, Hq, Dv] memory viewed as [B, Hq, L, Dv]: attention layers transpose
  // the result back to [B, L, Hq * Dv], which is then free.
  at::Tensor out = at::empty({B, L, Hq, Dv}, query.options()).transpose(1, 2);
  at::Tensor lse = at::empty({B, Hq, L}, query.options().dtype(at::kFloat));
  at::Tensor mask = bias.defined() ? bias.expand({B, Hq, L, S}) : bias;
  nk::AttentionParams p = params_of(query, key, value, mask, is_causal, scale);
  // The lambda keeps the storages stream order does not protect (storages_to_keep).
  launch(query.device().index(), kForwardOp,
         [p, keep = storages_to_keep({&query, &key, &value, &mask, &out, &lse}), out_view = view_of(out),
          lse_data = lse.data_ptr<float>(), parallel = choose_parallel_for(query, key, value)]() {
           nk::attention_forward(p, out_view, lse_data, parallel);
         });
  counter.count(ExecPath::kKernel);
  // Dropout seed and offset as real (unused) tensors, as CUDA's fused kernels
  // return them: autograd saves them for the backward, and AOTAutograd
  // (torch.compile) requires every saved value to be a tensor.
  return {out, lse, at::Tensor(), at::Tensor(), c10::SymInt(L), c10::SymInt(S),
          at::zeros({}, at::kLong), at::zeros({}, at::kLong), at::Tensor()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_overrideable_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k, double dropout_p,
    bool is_causal, const at::Tensor& philox_seed, const at::Tensor& philox_offset,
    std::optional<double> scale) {
  static OpCounter& counter = op_counter(kBackwardOp);
  check_arguments(kBackwardOp, query, key, value, attn_bias);
  TORCH_CHECK(dropout_p == 0.0, kBackwardOp, ": dropout_p=", dropout_p, " is not supported");
  TORCH_CHECK(grad_out.sizes() == out.sizes() && grad_out.device() == query.device() &&
                  grad_out.scalar_type() == query.scalar_type(),
              kBackwardOp, ": grad_out ", grad_out.sizes(), " ", grad_out.scalar_type(),
              " does not match the output ", out.sizes(), " ", out.scalar_type());
  TORCH_CHECK(logsumexp.defined() && logsumexp.scalar_type() == at::kFloat &&
                  logsumexp.is_contiguous(),
              kBackwardOp, ": expected the forward's float32 logsumexp");
  const int64_t B = query.size(0), Hq = query.size(1), L = query.size(2), S = key.size(2);
  at::Tensor dq = grad_input_mask[0] ? at::empty_like(query) : at::Tensor();
  at::Tensor dk = grad_input_mask[1] ? at::empty_like(key) : at::Tensor();
  at::Tensor dv = grad_input_mask[2] ? at::empty_like(value) : at::Tensor();
  const bool want_dbias = grad_input_mask[3] && attn_bias.defined();
  at::Tensor dscores =
      want_dbias ? at::zeros({B, Hq, L, S}, query.options().dtype(at::kFloat)) : at::Tensor();
  at::Tensor mask = attn_bias.defined() ? attn_bias.expand({B, Hq, L, S}) : attn_bias;
  nk::AttentionParams p = params_of(query, key, value, mask, is_causal, scale);
  nk::AttentionGrads g;
  if (dq.defined()) g.dq = view_of(dq);
  if (dk.defined()) g.dk = view_of(dk);
  if (dv.defined()) g.dv = view_of(dv);
  if (dscores.defined()) g.dscores = dscores.data_ptr<float>();
  launch(query.device().index(), kBackwardOp,
         [p, g, keep = storages_to_keep({&query, &key, &value, &mask, &out, &logsumexp, &grad_out, &dq,
                                    &dk, &dv, &dscores}),
          out_view = view_of(out), lse_data = logsumexp.data_ptr<float>(),
          grad_view = view_of(grad_out), parallel = choose_parallel_for(query, key, value)]() {
           nk::attention_backward(p, out_view, lse_data, grad_view, g, parallel);
         });
  counter.count(ExecPath::kKernel);
  at::Tensor dbias;
  if (want_dbias) {
    // The bias was broadcast: its gradient sums over the broadcast dimensions.
    dbias = dscores.to(attn_bias.scalar_type()).sum_to_size(attn_bias.sizes());
  }
  return {dq, dk, dv, dbias};
}

}  // namespace torchneuron::native

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchneuron::native::fused_sdp_choice)
}  // namespace at::native
