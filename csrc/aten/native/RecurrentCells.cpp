#include "csrc/aten/native/RecurrentCells.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/StringUtil.h>

#include <neuronkernels/rnn.hpp>

#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/KernelSupport.h"

namespace torchneuron::native {
namespace {

namespace nk = neuronkernels;

constexpr const char* kLstmOp = "aten::_thnn_fused_lstm_cell";
constexpr const char* kLstmBackwardOp = "aten::_thnn_fused_lstm_cell_backward_impl";
constexpr const char* kGruOp = "aten::_thnn_fused_gru_cell";
constexpr const char* kGruBackwardOp = "aten::_thnn_fused_gru_cell_backward";

// Checks one argument: on `device`, of `dtype`, with `sizes`. Errors name the
// op, the argument and what it got.
void check_arg(const char* op, const char* name, const at::Tensor& t, const at::Device& device,
               at::ScalarType dtype, at::IntArrayRef sizes) {
  TORCH_CHECK(t.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK(t.device() == device, op, ": expected ", name, " on ", device, ", got ",
              t.device());
  TORCH_CHECK(t.scalar_type() == dtype, op, ": expected ", name, " of dtype ", dtype, ", got ",
              t.scalar_type());
  TORCH_CHECK(t.layout() == at::kStrided, op, ": expected a strided ", name);
  TORCH_CHECK(t.sizes() == sizes, op, ": expected ", name, " of shape ", sizes, ", got ",
              t.sizes());
}

// The first argument fixes device and dtype; it must be a 2-D neuron tensor
// of a kernel dtype.
void check_lead(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.defined() && t.is_privateuseone(), op, ": expected ", name,
              " on a neuron device, got ", t.defined() ? t.device().str() : "an undefined tensor");
  TORCH_CHECK(kernel_dtype(t.scalar_type()) || t.scalar_type() == at::kDouble, op, ": expected ", name,
              " of dtype float32, bfloat16, float16 or float64, got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 2, op, ": expected a 2-D ", name, " [batch, gates], got shape ",
              t.sizes());
}

// Rows the kernel can read: contiguous within each row (else a copy).
at::Tensor as_rows(const at::Tensor& t) {
  if (t.size(1) <= 1 || t.stride(1) == 1) {
    if (t.size(0) <= 1 || t.stride(0) >= t.size(1)) return t;
  }
  return t.contiguous();
}

nk::Rows rows_of(const at::Tensor& t) {
  if (!t.defined()) return {};
  return {t.data_ptr(), t.size(0) > 1 ? t.stride(0) : t.size(1)};
}

at::Tensor opt(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? *t : at::Tensor();
}

// Gate biases: both 1-D [gates] vectors or none.
std::pair<at::Tensor, at::Tensor> checked_biases(const char* op, const at::Tensor& gates,
                                                 const std::optional<at::Tensor>& ib,
                                                 const std::optional<at::Tensor>& hb) {
  at::Tensor input_bias = opt(ib), hidden_bias = opt(hb);
  TORCH_CHECK(input_bias.defined() == hidden_bias.defined(), op,
              ": expected both input_bias and hidden_bias or neither");
  if (!input_bias.defined()) return {};
  const int64_t G = gates.size(1);
  check_arg(op, "input_bias", input_bias, gates.device(), gates.scalar_type(), {G});
  check_arg(op, "hidden_bias", hidden_bias, gates.device(), gates.scalar_type(), {G});
  return {input_bias.contiguous(), hidden_bias.contiguous()};
}

int64_t hidden_of(const char* op, const char* name, const at::Tensor& gates, int64_t factor) {
  TORCH_CHECK(gates.size(1) % factor == 0, op, ": ", name, " has ", gates.size(1),
              " columns, not a multiple of ", factor, " gates");
  return gates.size(1) / factor;
}

at::Tensor empty_rows(const at::Tensor& like, int64_t rows, int64_t cols) {
  return at::empty({rows, cols}, like.options());
}

// float64 cells (rare: the kernel computes in float32) run the cell's math as
// ATen ops, each queued like any other op; the workspaces hold what the
// backward needs in the layout CUDA's fused cells use.
at::Tensor biased_gates(const at::Tensor& gates, const at::Tensor& bias) {
  return bias.defined() ? gates + bias : gates;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_math(
    const at::Tensor& ig, const at::Tensor& hg, const at::Tensor& cx, const at::Tensor& bi,
    const at::Tensor& bh) {
  auto g = biased_gates(ig, bi) + biased_gates(hg, bh);
  auto chunks = g.chunk(4, 1);
  auto i = at::sigmoid(chunks[0]), f = at::sigmoid(chunks[1]), c = at::tanh(chunks[2]),
       o = at::sigmoid(chunks[3]);
  auto cy = f * cx + i * c;
  auto hy = o * at::tanh(cy);
  return {hy, cy, at::cat({i, f, c, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor> lstm_cell_backward_math(const at::Tensor& grad_hy,
                                                           const at::Tensor& grad_cy,
                                                           const at::Tensor& cx,
                                                           const at::Tensor& cy,
                                                           const at::Tensor& workspace) {
  auto w = workspace.chunk(4, 1);
  const auto &i = w[0], &f = w[1], &c = w[2], &o = w[3];
  auto tanh_cy = at::tanh(cy);
  at::Tensor grad_o, grad_c = grad_cy.defined() ? grad_cy : at::zeros_like(cy);
  if (grad_hy.defined()) {
    grad_o = grad_hy * tanh_cy * o * (1 - o);
    grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy);
  } else {
    grad_o = at::zeros_like(o);
  }
  auto grad_gates = at::cat({grad_c * c * i * (1 - i), grad_c * cx * f * (1 - f),
                             grad_c * i * (1 - c * c), grad_o},
                            1);
  return {grad_gates, grad_c * f};
}

std::tuple<at::Tensor, at::Tensor> gru_cell_math(const at::Tensor& ig, const at::Tensor& hg,
                                                 const at::Tensor& hx, const at::Tensor& bi,
                                                 const at::Tensor& bh) {
  auto x = biased_gates(ig, bi).chunk(3, 1), h = biased_gates(hg, bh).chunk(3, 1);
  auto r = at::sigmoid(x[0] + h[0]), z = at::sigmoid(x[1] + h[1]);
  auto n = at::tanh(x[2] + r * h[2]);
  auto hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, h[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gru_cell_backward_math(
    const at::Tensor& grad_hy, const at::Tensor& workspace) {
  auto w = workspace.chunk(5, 1);
  const auto &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  auto grad_in = grad_hy * (1 - z) * (1 - n * n);
  auto grad_z = grad_hy * (hx - n) * z * (1 - z);
  auto grad_r = grad_in * hn * r * (1 - r);
  return {at::cat({grad_r, grad_z, grad_in}, 1), at::cat({grad_r, grad_z, grad_in * r}, 1),
          grad_hy * z};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> thnn_fused_lstm_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  static OpCounter& counter = op_counter(kLstmOp);
  check_lead(kLstmOp, "input_gates", input_gates);
  const int64_t B = input_gates.size(0), H = hidden_of(kLstmOp, "input_gates", input_gates, 4);
  const auto dev = input_gates.device();
  const auto dtype = input_gates.scalar_type();
  check_arg(kLstmOp, "hidden_gates", hidden_gates, dev, dtype, input_gates.sizes());
  check_arg(kLstmOp, "cx", cx, dev, dtype, {B, H});
  auto [bi, bh] = checked_biases(kLstmOp, input_gates, input_bias, hidden_bias);
  if (dtype == at::kDouble) return lstm_cell_math(input_gates, hidden_gates, cx, bi, bh);
  at::Tensor ig = as_rows(input_gates), hg = as_rows(hidden_gates), c = as_rows(cx);
  at::Tensor hy = empty_rows(ig, B, H), cy = empty_rows(ig, B, H),
             workspace = empty_rows(ig, B, 4 * H);
  counter.count(ExecPath::kKernel);
  if (B * H == 0) return {hy, cy, workspace};
  nk::LstmCellForwardParams p;
  p.dtype = *kernel_dtype(dtype);
  p.batch = B;
  p.hidden = H;
  p.input_gates = rows_of(ig);
  p.hidden_gates = rows_of(hg);
  p.input_bias = bi.defined() ? bi.data_ptr() : nullptr;
  p.hidden_bias = bh.defined() ? bh.data_ptr() : nullptr;
  p.cx = rows_of(c);
  p.hy = rows_of(hy);
  p.cy = rows_of(cy);
  p.workspace = rows_of(workspace);
  launch(dev.index(), kLstmOp, [p, keep = storages_to_keep({&ig, &hg, &c, &bi, &bh, &hy, &cy, &workspace})] {
    nk::lstm_cell_forward(p, device_parallel_for);
  });
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> thnn_fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy_opt, const std::optional<at::Tensor>& grad_cy_opt,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  static OpCounter& counter = op_counter(kLstmBackwardOp);
  at::Tensor grad_hy = opt(grad_hy_opt), grad_cy = opt(grad_cy_opt);
  if (!grad_hy.defined() && !grad_cy.defined()) return {};  // nothing flows back
  check_lead(kLstmBackwardOp, "workspace", workspace);
  const int64_t B = workspace.size(0), H = hidden_of(kLstmBackwardOp, "workspace", workspace, 4);
  const auto dev = workspace.device();
  const auto dtype = workspace.scalar_type();
  if (grad_hy.defined()) check_arg(kLstmBackwardOp, "grad_hy", grad_hy, dev, dtype, {B, H});
  if (grad_cy.defined()) check_arg(kLstmBackwardOp, "grad_cy", grad_cy, dev, dtype, {B, H});
  check_arg(kLstmBackwardOp, "cx", cx, dev, dtype, {B, H});
  check_arg(kLstmBackwardOp, "cy", cy, dev, dtype, {B, H});
  if (dtype == at::kDouble) {
    auto [grad_gates, grad_cx] = lstm_cell_backward_math(grad_hy, grad_cy, cx, cy, workspace);
    return {grad_gates, grad_cx, has_bias ? at::sum(grad_gates, {0}) : at::Tensor()};
  }
  at::Tensor ws = as_rows(workspace), c0 = as_rows(cx), c1 = as_rows(cy);
  if (grad_hy.defined()) grad_hy = as_rows(grad_hy);
  if (grad_cy.defined()) grad_cy = as_rows(grad_cy);
  at::Tensor grad_gates = empty_rows(ws, B, 4 * H), grad_cx = empty_rows(ws, B, H);
  counter.count(ExecPath::kKernel);
  if (B * H > 0) {
    nk::LstmCellBackwardParams p;
    p.dtype = *kernel_dtype(dtype);
    p.batch = B;
    p.hidden = H;
    p.grad_hy = rows_of(grad_hy);
    p.grad_cy = rows_of(grad_cy);
    p.cx = rows_of(c0);
    p.cy = rows_of(c1);
    p.workspace = rows_of(ws);
    p.grad_gates = rows_of(grad_gates);
    p.grad_cx = rows_of(grad_cx);
    launch(dev.index(), kLstmBackwardOp,
           [p, keep = storages_to_keep({&grad_hy, &grad_cy, &c0, &c1, &ws, &grad_gates, &grad_cx})] {
             nk::lstm_cell_backward(p, device_parallel_for);
           });
  }
  at::Tensor grad_bias = has_bias ? at::sum(grad_gates, {0}) : at::Tensor();
  return {grad_gates, grad_cx, grad_bias};
}

std::tuple<at::Tensor, at::Tensor> thnn_fused_gru_cell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates, const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  static OpCounter& counter = op_counter(kGruOp);
  check_lead(kGruOp, "input_gates", input_gates);
  const int64_t B = input_gates.size(0), H = hidden_of(kGruOp, "input_gates", input_gates, 3);
  const auto dev = input_gates.device();
  const auto dtype = input_gates.scalar_type();
  check_arg(kGruOp, "hidden_gates", hidden_gates, dev, dtype, input_gates.sizes());
  check_arg(kGruOp, "hx", hx, dev, dtype, {B, H});
  auto [bi, bh] = checked_biases(kGruOp, input_gates, input_bias, hidden_bias);
  if (dtype == at::kDouble) return gru_cell_math(input_gates, hidden_gates, hx, bi, bh);
  at::Tensor ig = as_rows(input_gates), hg = as_rows(hidden_gates), h = as_rows(hx);
  at::Tensor hy = empty_rows(ig, B, H), workspace = empty_rows(ig, B, 5 * H);
  counter.count(ExecPath::kKernel);
  if (B * H == 0) return {hy, workspace};
  nk::GruCellForwardParams p;
  p.dtype = *kernel_dtype(dtype);
  p.batch = B;
  p.hidden = H;
  p.input_gates = rows_of(ig);
  p.hidden_gates = rows_of(hg);
  p.input_bias = bi.defined() ? bi.data_ptr() : nullptr;
  p.hidden_bias = bh.defined() ? bh.data_ptr() : nullptr;
  p.hx = rows_of(h);
  p.hy = rows_of(hy);
  p.workspace = rows_of(workspace);
  launch(dev.index(), kGruOp, [p, keep = storages_to_keep({&ig, &hg, &h, &bi, &bh, &hy, &workspace})] {
    nk::gru_cell_forward(p, device_parallel_for);
  });
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> thnn_fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  static OpCounter& counter = op_counter(kGruBackwardOp);
  check_lead(kGruBackwardOp, "workspace", workspace);
  const int64_t B = workspace.size(0), H = hidden_of(kGruBackwardOp, "workspace", workspace, 5);
  check_arg(kGruBackwardOp, "grad_hy", grad_hy, workspace.device(), workspace.scalar_type(),
            {B, H});
  // Bias gradients are the gate gradients summed over the batch.
  auto with_bias_grads = [has_bias](at::Tensor gi, at::Tensor gh, at::Tensor ghx) {
    at::Tensor gbi = has_bias ? at::sum(gi, {0}) : at::Tensor();
    at::Tensor gbh = has_bias ? at::sum(gh, {0}) : at::Tensor();
    return std::make_tuple(gi, gh, ghx, gbi, gbh);
  };
  if (workspace.scalar_type() == at::kDouble) {
    auto [gi, gh, ghx] = gru_cell_backward_math(grad_hy, workspace);
    return with_bias_grads(gi, gh, ghx);
  }
  at::Tensor ws = as_rows(workspace), go = as_rows(grad_hy);
  at::Tensor gi = empty_rows(ws, B, 3 * H), gh = empty_rows(ws, B, 3 * H),
             ghx = empty_rows(ws, B, H);
  counter.count(ExecPath::kKernel);
  if (B * H > 0) {
    nk::GruCellBackwardParams p;
    p.dtype = *kernel_dtype(ws.scalar_type());
    p.batch = B;
    p.hidden = H;
    p.grad_hy = rows_of(go);
    p.workspace = rows_of(ws);
    p.grad_input_gates = rows_of(gi);
    p.grad_hidden_gates = rows_of(gh);
    p.grad_hx = rows_of(ghx);
    launch(workspace.device().index(), kGruBackwardOp,
           [p, keep = storages_to_keep({&go, &ws, &gi, &gh, &ghx})] {
             nk::gru_cell_backward(p, device_parallel_for);
           });
  }
  return with_bias_grads(gi, gh, ghx);
}

}  // namespace torchneuron::native
