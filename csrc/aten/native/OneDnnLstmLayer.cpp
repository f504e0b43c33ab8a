#include "csrc/aten/native/OneDnnLstmLayer.h"

#include <ATen/Context.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mkldnn_rnn_layer_backward_cpu_dispatch.h>
#include <ATen/ops/mkldnn_rnn_layer_cpu_dispatch.h>
#include <torch/csrc/autograd/custom_function.h>

#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"

namespace torchneuron::native {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kForwardOp = "torchneuron::onednn_lstm_layer";
constexpr const char* kBackwardOp = "torchneuron::onednn_lstm_layer_backward";
constexpr int64_t kLstmMode = 2;  // ideep::rnn_kind::LSTM, as ATen's mkldnn_rnn passes it

// oneDNN's training workspace (gates and states of every step, in its own
// layout and size), written by the forward task and read by the backward
// one. Host scratch like oneDNN's on CPU, held by the layer's autograd node.
struct Workspace : torch::CustomClassHolder {
  at::Tensor bytes;
};

at::Tensor alias_or_undefined(const at::Tensor& t) { return t.defined() ? queued_alias(t) : t; }

// Multiply-adds of a layer over all steps, for the worker's choice of threads.
int64_t layer_macs(const at::Tensor& x, const at::Tensor& w_ih, const at::Tensor& w_hh) {
  return x.size(0) * w_ih.size(0) * (w_ih.size(1) + w_hh.size(1));
}

// The forward primitive on CPU aliases of the device buffers.
struct ForwardTask {
  at::Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0;  // x [T, B, I]
  at::Tensor y, hy, cy;                          // y [T, B, H]
  c10::intrusive_ptr<Workspace> workspace;       // null: inference only
  bool reverse = false, train = false;

  void operator()() const {
    // Grad mode tells ATen's kernel to keep the training workspace.
    at::AutoGradMode keep_workspace(workspace.defined());
    auto [out, h, c, ws] = at::cpu::mkldnn_rnn_layer(
        x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse, /*batch_sizes=*/{}, kLstmMode,
        /*hidden_size=*/h0.size(1), /*num_layers=*/1, /*has_biases=*/b_ih.defined(),
        /*bidirectional=*/false, /*batch_first=*/false, train);
    y.copy_(out);
    hy.copy_(h);
    cy.copy_(c);
    if (workspace) workspace->bytes = std::move(ws);
  }
};

struct BackwardTask {
  at::Tensor x, w_ih, w_hh, b_ih, b_hh, h0, c0, y, hy, cy;  // the forward's
  at::Tensor grad_y, grad_hy, grad_cy;
  c10::intrusive_ptr<Workspace> workspace;
  bool reverse = false, train = false;
  at::Tensor dx, dw_ih, dw_hh, db, dh0, dc0;  // undefined: not wanted

  void operator()() const {
    // Gradients come back in float32 (oneDNN accumulates 16-bit types in
    // float32); copying them into the device buffers rounds them once.
    auto [gx, gw_ih, gw_hh, gb, gb2, gh0, gc0] = at::cpu::mkldnn_rnn_layer_backward(
        x, w_ih, w_hh, b_ih, b_hh, h0, c0, y, hy, cy, grad_y, grad_hy, grad_cy, reverse,
        kLstmMode, /*hidden_size=*/h0.size(1), /*num_layers=*/1, /*has_biases=*/b_ih.defined(),
        train, /*bidirectional=*/false, /*batch_sizes=*/{}, /*batch_first=*/false,
        workspace->bytes);
    const std::pair<const at::Tensor*, const at::Tensor*> results[] = {
        {&dx, &gx}, {&dw_ih, &gw_ih}, {&dw_hh, &gw_hh}, {&db, &gb}, {&dh0, &gh0}, {&dc0, &gc0}};
    for (const auto& [dst, src] : results) {
      if (dst->defined()) dst->copy_(*src);
    }
  }
};

struct OneDnnLstmLayer : public torch::autograd::Function<OneDnnLstmLayer> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h0,
                               const at::Tensor& c0, const at::Tensor& w_ih,
                               const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih,
                               const std::optional<at::Tensor>& b_hh, int64_t steps, bool reverse,
                               bool train, bool record_workspace) {
    static OpCounter& counter = op_counter(kForwardOp);
    const int64_t N = x.size(0), B = h0.size(0), H = h0.size(1);
    const at::Tensor bi = b_ih ? b_ih->contiguous() : at::Tensor();
    const at::Tensor bh = b_hh ? b_hh->contiguous() : at::Tensor();
    at::Tensor y = at::empty({N, H}, x.options()), hy = at::empty({B, H}, x.options()),
               cy = at::empty({B, H}, x.options());
    auto workspace = record_workspace ? c10::make_intrusive<Workspace>()
                                      : c10::intrusive_ptr<Workspace>();
    ForwardTask task{queued_alias(x).view({steps, B, x.size(1)}), queued_alias(w_ih.contiguous()),
                     queued_alias(w_hh.contiguous()), alias_or_undefined(bi), alias_or_undefined(bh),
                     queued_alias(h0), queued_alias(c0), queued_alias(y).view({steps, B, H}),
                     queued_alias(hy), queued_alias(cy), workspace, reverse, train};
    launch_cpu_kernels(x.device().index(), kForwardOp, layer_macs(x, w_ih, w_hh),
                       /*matrix=*/true, std::move(task));
    counter.count(ExecPath::kKernel);
    if (record_workspace) {
      ctx->save_for_backward({x, h0, c0, w_ih, w_hh, bi, bh, y, hy, cy});
      ctx->saved_data["workspace"] = c10::IValue::make_capsule(workspace);
      ctx->saved_data["steps"] = steps;
      ctx->saved_data["reverse"] = reverse;
      ctx->saved_data["train"] = train;
    }
    return {y, hy, cy};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static OpCounter& counter = op_counter(kBackwardOp);
    TORCH_CHECK(!at::GradMode::is_enabled(), kBackwardOp,
                ": the backward of LSTM on neuron is not differentiable (double backward is not "
                "supported)");
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &h0 = saved[1], &c0 = saved[2], &w_ih = saved[3],
                     &w_hh = saved[4], &bi = saved[5], &bh = saved[6], &y = saved[7],
                     &hy = saved[8], &cy = saved[9];
    const int64_t T = ctx->saved_data["steps"].toInt(), B = h0.size(0);
    auto want = [&](int i, const at::Tensor& like) {
      return ctx->needs_input_grad(i) ? at::empty(like.sizes(), like.options()) : at::Tensor();
    };
    // needs_input_grad counts the tensors present: x, h0, c0, w_ih, w_hh, [b_ih, b_hh].
    at::Tensor dx = want(0, x), dh0 = want(1, h0), dc0 = want(2, c0), dw_ih = want(3, w_ih),
               dw_hh = want(4, w_hh);
    const bool want_bi = bi.defined() && ctx->needs_input_grad(5),
               want_bh = bi.defined() && ctx->needs_input_grad(6), bias_grad = want_bi || want_bh;
    at::Tensor db = bias_grad ? at::empty(bi.sizes(), bi.options()) : at::Tensor();
    const at::Tensor gy = grads[0].contiguous(), ghy = grads[1].contiguous(),
                     gcy = grads[2].contiguous();
    auto seq = [&](const at::Tensor& t) { return queued_alias(t).view({T, B, t.size(1)}); };
    BackwardTask task{seq(x),
                      queued_alias(w_ih.contiguous()),
                      queued_alias(w_hh.contiguous()),
                      alias_or_undefined(bi),
                      alias_or_undefined(bh),
                      queued_alias(h0),
                      queued_alias(c0),
                      seq(y),
                      queued_alias(hy),
                      queued_alias(cy),
                      seq(gy),
                      queued_alias(ghy),
                      queued_alias(gcy),
                      c10::static_intrusive_pointer_cast<Workspace>(
                          ctx->saved_data["workspace"].toCapsule()),
                      ctx->saved_data["reverse"].toBool(),
                      ctx->saved_data["train"].toBool(),
                      dx.defined() ? seq(dx) : dx,
                      alias_or_undefined(dw_ih),
                      alias_or_undefined(dw_hh),
                      alias_or_undefined(db),
                      alias_or_undefined(dh0),
                      alias_or_undefined(dc0)};
    launch_cpu_kernels(x.device().index(), kBackwardOp, layer_macs(x, w_ih, w_hh),
                       /*matrix=*/true, std::move(task));
    counter.count(ExecPath::kKernel);
    // oneDNN has one bias per gate: both biases get its gradient.
    at::Tensor db_ih = want_bi ? db : at::Tensor(), db_hh = want_bh ? db : at::Tensor();
    return {dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh, at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

bool onednn_has_bfloat16() {
  static const bool has = [] {
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_is_mkldnn_bf16_supported", "");
    return op.typed<bool()>().call();
  }();
  return has;
}

}  // namespace

bool onednn_lstm_applies(c10::ScalarType dtype, bool has_projection) {
  if (has_projection || !at::globalContext().userEnabledMkldnn()) return false;
  return dtype == at::kFloat || (dtype == at::kBFloat16 && onednn_has_bfloat16());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> onednn_lstm_layer(
    const at::Tensor& x, int64_t steps, const at::Tensor& h0, const at::Tensor& c0,
    const at::Tensor& w_ih, const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih,
    const std::optional<at::Tensor>& b_hh, bool reverse, bool train) {
  bool record = false;
  if (at::GradMode::is_enabled()) {
    for (const at::Tensor* t : {&x, &h0, &c0, &w_ih, &w_hh}) record = record || t->requires_grad();
    for (const auto* b : {&b_ih, &b_hh}) record = record || (*b && (*b)->requires_grad());
  }
  // ATen's kernel takes the states as separate buffers.
  const at::Tensor h = h0.contiguous();
  at::Tensor c = c0.contiguous();
  if (c.data_ptr() == h.data_ptr()) c = c.clone();
  variable_list r = OneDnnLstmLayer::apply(x, h, c, w_ih, w_hh, b_ih, b_hh, steps, reverse, train,
                                           record);
  return {r[0], r[1], r[2]};
}

}  // namespace torchneuron::native
