// Why whole layers: PyTorch's composite runs a recurrent layer step by step
// on a non-CPU device, each step a few ops (two matrix products, the fused
// cell) and its backward a dozen more (products, gradient sums over the
// steps, bias reductions): about 3400 queued ops for one training step of a
// 2-layer LSTM over 64 steps, each of them a dispatch and a queued task. Here the steps of one layer and direction are one queued
// task, and everything that does not depend on the previous step (the input
// projection, the gradients of the weights, inputs and biases) is one large
// matrix product over all steps, which the GEMM runs at full speed.
//
// A sequence is a list of steps, each a block of rows of a 2-D [rows, width]
// tensor: step t holds rows [offset[t], offset[t] + batch[t]). A padded
// [T, B, I] input has T steps of B rows; a packed sequence has decreasing
// batch sizes (sequences sorted by length), and step t updates only the
// first batch[t] rows of the running state, so each sequence's final state
// is left where its last step put it.
#include "csrc/aten/native/RecurrentLayers.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include <ATen/ops/add.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <omp.h>
#include <torch/csrc/autograd/custom_function.h>

#include <neuronkernels/rnn.hpp>

#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/KernelSupport.h"
#include "csrc/aten/native/OneDnnLstmLayer.h"
#include "neuronrt/neuronrt.hpp"

namespace torchneuron::native {
namespace {

namespace nk = neuronkernels;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr const char* kForwardOp = "torchneuron::recurrent_layer";
constexpr const char* kBackwardOp = "torchneuron::recurrent_layer_backward";

enum class Cell { kLstm, kGru };

struct Steps {
  std::vector<int64_t> batch, offset;
  int64_t rows = 0;
};

std::shared_ptr<const Steps> steps_of(std::vector<int64_t> batch) {
  auto s = std::make_shared<Steps>();
  s->batch = std::move(batch);
  for (int64_t b : s->batch) {
    s->offset.push_back(s->rows);
    s->rows += b;
  }
  return s;
}

std::shared_ptr<const Steps> padded_steps(int64_t T, int64_t B) {
  return steps_of(std::vector<int64_t>(size_t(T), B));
}

// The steps of a packed sequence, or nothing when its batch sizes are not
// what pack_padded_sequence makes (positive, non-increasing, from the
// states' batch, covering the data's rows); PyTorch's composite reports those.
std::shared_ptr<const Steps> packed_steps(const at::Tensor& batch_sizes, int64_t rows,
                                          int64_t batch) {
  if (batch_sizes.is_privateuseone() || batch_sizes.dim() != 1 || batch_sizes.numel() == 0 ||
      batch_sizes.is_floating_point()) {
    return nullptr;
  }
  const at::Tensor bs = batch_sizes.to(at::kLong).contiguous();
  const int64_t* p = bs.data_ptr<int64_t>();
  if (p[0] != batch) return nullptr;
  for (int64_t t = 0; t < bs.numel(); ++t) {
    if (p[t] <= 0 || (t > 0 && p[t] > p[t - 1])) return nullptr;
  }
  auto s = steps_of(std::vector<int64_t>(p, p + bs.numel()));
  return s->rows == rows ? s : nullptr;
}

struct LayerConfig {
  Cell cell = Cell::kLstm;
  bool reverse = false;
  int64_t hidden = 0;
  std::shared_ptr<const Steps> steps;
};

int64_t gates_of(Cell c) { return c == Cell::kLstm ? 4 : 3; }
int64_t workspace_of(Cell c) { return c == Cell::kLstm ? 4 : 5; }

// Row block [off, off + n) of a contiguous 2-D CPU alias.
char* row_ptr(const at::Tensor& t, int64_t row) {
  return static_cast<char*>(t.data_ptr()) + row * t.stride(0) * t.element_size();
}
at::Tensor rows(const at::Tensor& t, int64_t off, int64_t n) { return t.narrow(0, off, n); }
void copy_rows(const at::Tensor& dst, int64_t dst_row, const at::Tensor& src, int64_t src_row,
               int64_t n) {
  std::memcpy(row_ptr(dst, dst_row), row_ptr(src, src_row),
              size_t(n * src.size(1) * src.element_size()));
}
nk::Rows rows_at(const at::Tensor& t, int64_t row) { return {row_ptr(t, row), t.stride(0)}; }
const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// CPU aliases of the neuron buffers a queued task works on (taken on the
// calling thread, see Launch.h).
at::Tensor cpu_view(const at::Tensor& t) { return t.defined() ? queued_alias(t) : at::Tensor(); }

// out = a . b (+ add), with the columns split among the runtime's compute
// threads in blocks, each one single-threaded GEMM. Blocks are claimed, not
// assigned (neuronrt::parallel_for): a thread the OS has not scheduled holds
// up only the block it took, where an OpenMP team's barrier would wait for it
// on every step.
void split_product(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                   const at::Tensor& add = at::Tensor()) {
  constexpr int64_t kBlock = 64;
  const int64_t N = out.size(1), blocks = (N + kBlock - 1) / kBlock;
  auto run = [&](int64_t c0, int64_t c1) {
    at::Tensor o = out.narrow(1, c0, c1 - c0), bb = b.narrow(1, c0, c1 - c0);
    if (add.defined()) {
      at::addmm_out(o, add.narrow(1, c0, c1 - c0), a, bb);
    } else {
      at::mm_out(o, a, bb);
    }
  };
  if (blocks < 2) return run(0, N);
  neuronrt::parallel_for(blocks, [&](int64_t b0, int64_t b1) {
    omp_set_num_threads(1);  // ATen's GEMM would open a team of its own on a helper
    run(b0 * kBlock, std::min(N, b1 * kBlock));
  });
}

// The forward recurrence of one layer and direction, on CPU aliases.
struct ForwardTask {
  LayerConfig cfg;
  nk::DType dtype;
  at::Tensor gi, w_hh_t, b_ih, b_hh, w_hr;  // inputs (w_hh_t: w_hh transposed, row-major)
  at::Tensor h, c;                        // running state [B, P], [B, H] (final state at the end)
  at::Tensor y, hprev, cprev, cnext, hraw, ws, hg;

  void operator()() const {
    const Steps& s = *cfg.steps;
    const int64_t T = int64_t(s.batch.size()), H = cfg.hidden;
    for (int64_t k = 0; k < T; ++k) {
      const int64_t t = cfg.reverse ? T - 1 - k : k, bs = s.batch[t], off = s.offset[t];
      if (bs == 0) continue;
      copy_rows(hprev, off, h, 0, bs);
      at::Tensor hgs = rows(hg, 0, bs);
      split_product(hgs, rows(hprev, off, bs), w_hh_t);
      if (cfg.cell == Cell::kLstm) {
        copy_rows(cprev, off, c, 0, bs);
        nk::LstmCellForwardParams p;
        p.dtype = dtype;
        p.batch = bs;
        p.hidden = H;
        p.input_gates = rows_at(gi, off);
        p.hidden_gates = rows_at(hg, 0);
        p.input_bias = ptr_or_null(b_ih);
        p.hidden_bias = ptr_or_null(b_hh);
        p.cx = rows_at(cprev, off);
        p.hy = rows_at(w_hr.defined() ? hraw : y, off);
        p.cy = rows_at(cnext, off);
        p.workspace = rows_at(ws, off);
        nk::lstm_cell_forward(p, device_parallel_for);
        if (w_hr.defined()) {
          at::Tensor ys = rows(y, off, bs);
          split_product(ys, rows(hraw, off, bs), w_hr.t());
        }
        copy_rows(c, 0, cnext, off, bs);
      } else {
        nk::GruCellForwardParams p;
        p.dtype = dtype;
        p.batch = bs;
        p.hidden = H;
        p.input_gates = rows_at(gi, off);
        p.hidden_gates = rows_at(hg, 0);
        p.input_bias = ptr_or_null(b_ih);
        p.hidden_bias = ptr_or_null(b_hh);
        p.hx = rows_at(hprev, off);
        p.hy = rows_at(y, off);
        p.workspace = rows_at(ws, off);
        nk::gru_cell_forward(p, device_parallel_for);
      }
      copy_rows(h, 0, y, off, bs);
    }
  }
};

// The backward recurrence: gradients of the pre-activation gates of every
// step (dgi for the input projection; for GRU dgh for the hidden one, which
// differs in the new gate), and of the initial state.
struct BackwardTask {
  LayerConfig cfg;
  nk::DType dtype;
  at::Tensor grad_y, w_hh, w_hr;                  // inputs
  at::Tensor hprev, cprev, cnext, ws;             // saved by the forward
  at::Tensor dh, dc;                              // running [B, P], [B, H]: initial-state grads at the end
  at::Tensor dy, dhraw, ghx, dgi, dgh;            // dy [N, P] (kept when projecting), scratch, results

  void operator()() const {
    const Steps& s = *cfg.steps;
    const int64_t T = int64_t(s.batch.size()), H = cfg.hidden;
    for (int64_t k = 0; k < T; ++k) {
      const int64_t t = cfg.reverse ? k : T - 1 - k, bs = s.batch[t], off = s.offset[t];
      if (bs == 0) continue;
      // The gradient reaching this step's output: from later steps (dh) and the layer's output.
      const int64_t dy_row = w_hr.defined() ? off : 0;
      at::Tensor dys = rows(dy, dy_row, bs);
      if (grad_y.defined()) {
        at::add_out(dys, rows(dh, 0, bs), rows(grad_y, off, bs));
      } else {
        copy_rows(dy, dy_row, dh, 0, bs);
      }
      at::Tensor dhs = rows(dh, 0, bs);
      if (cfg.cell == Cell::kLstm) {
        at::Tensor dh_cell = dys;
        if (w_hr.defined()) {
          dh_cell = rows(dhraw, 0, bs);
          split_product(dh_cell, dys, w_hr);
        }
        nk::LstmCellBackwardParams p;
        p.dtype = dtype;
        p.batch = bs;
        p.hidden = H;
        p.grad_hy = {dh_cell.data_ptr(), dh_cell.stride(0)};
        p.grad_cy = rows_at(dc, 0);
        p.cx = rows_at(cprev, off);
        p.cy = rows_at(cnext, off);
        p.workspace = rows_at(ws, off);
        p.grad_gates = rows_at(dgi, off);
        p.grad_cx = rows_at(dc, 0);  // in place: each chunk is read before it is written
        nk::lstm_cell_backward(p, device_parallel_for);
        split_product(dhs, rows(dgi, off, bs), w_hh);
      } else {
        nk::GruCellBackwardParams p;
        p.dtype = dtype;
        p.batch = bs;
        p.hidden = H;
        p.grad_hy = {dys.data_ptr(), dys.stride(0)};
        p.workspace = rows_at(ws, off);
        p.grad_input_gates = rows_at(dgi, off);
        p.grad_hidden_gates = rows_at(dgh, off);
        p.grad_hx = rows_at(ghx, 0);
        nk::gru_cell_backward(p, device_parallel_for);
        split_product(dhs, rows(dgh, off, bs), w_hh, rows(ghx, 0, bs));
      }
    }
  }
};

// Threads for a recurrence task. Each step's hidden product is small (batch
// 32, hidden 256: 8M multiply-adds, 0.3 ms on one core), and in the worker's
// OpenMP team every one of them is a parallel region ending in a barrier: on
// two shared cores over half of a training step's samples were libgomp
// spinning there, and without the team the 2-layer LSTM step ran 2-4x faster
// (docs/performance.md). So the task keeps the team only when each product is
// large enough to amortize the barrier; otherwise the products are split over
// the runtime's compute threads (split_product). The products over all steps
// (input projection, weight gradients) are separate ops and keep the team.
constexpr int64_t kStepTeamMacs = int64_t{64} << 20;
int64_t task_elements(int64_t batch, int64_t P, int64_t G, int64_t H) {
  return batch * P * G * H >= kStepTeamMacs ? batch * P * G * H : 1;
}

// One layer and direction over a whole sequence.
struct RecurrentLayer : public torch::autograd::Function<RecurrentLayer> {
  // Absent tensors (GRU's cell state, biases, the projection) are nullopt:
  // autograd takes only defined tensors as inputs.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& h0,
                               const std::optional<at::Tensor>& c0_opt, const at::Tensor& w_ih,
                               const at::Tensor& w_hh, const std::optional<at::Tensor>& b_ih_opt,
                               const std::optional<at::Tensor>& b_hh_opt,
                               const std::optional<at::Tensor>& w_hr_opt, LayerConfig cfg) {
    const at::Tensor c0 = c0_opt.value_or(at::Tensor()), b_ih = b_ih_opt.value_or(at::Tensor()),
                     b_hh = b_hh_opt.value_or(at::Tensor()), w_hr = w_hr_opt.value_or(at::Tensor());
    static OpCounter& counter = op_counter(kForwardOp);
    const bool lstm = cfg.cell == Cell::kLstm;
    const int64_t H = cfg.hidden, G = gates_of(cfg.cell), N = cfg.steps->rows, B = h0.size(0);
    const int64_t P = h0.size(1);
    const auto opts = x.options();
    // Everything that does not depend on the previous step: one product.
    at::Tensor gi = at::mm(x, w_ih.t());
    // Row-major [P, G * H]: the per-step product h . w_hh^T then streams the
    // weights in the GEMM's preferred order (a few percent per step).
    at::Tensor w_hh_t = w_hh.t().contiguous();
    at::Tensor h = h0.clone(at::MemoryFormat::Contiguous);
    at::Tensor c = lstm ? c0.clone(at::MemoryFormat::Contiguous) : at::Tensor();
    at::Tensor y = at::empty({N, P}, opts), hprev = at::empty({N, P}, opts);
    at::Tensor ws = at::empty({N, workspace_of(cfg.cell) * H}, opts);
    at::Tensor hg = at::empty({B, G * H}, opts);
    at::Tensor cprev, cnext, hraw;
    if (lstm) {
      cprev = at::empty({N, H}, opts);
      cnext = at::empty({N, H}, opts);
    }
    if (w_hr.defined()) hraw = at::empty({N, H}, opts);
    const at::Tensor bi = b_ih.defined() ? b_ih.contiguous() : b_ih;
    const at::Tensor bh = b_hh.defined() ? b_hh.contiguous() : b_hh;
    ForwardTask task{cfg,          *kernel_dtype(x.scalar_type()),
                     cpu_view(gi),    cpu_view(w_hh_t),
                     cpu_view(bi),    cpu_view(bh),
                     cpu_view(w_hr),  cpu_view(h),
                     cpu_view(c),     cpu_view(y),
                     cpu_view(hprev), cpu_view(cprev),
                     cpu_view(cnext), cpu_view(hraw),
                     cpu_view(ws),    cpu_view(hg)};
    launch_cpu_kernels(x.device().index(), kForwardOp, task_elements(B, P, G, H),
                       /*matrix=*/true, std::move(task));
    counter.count(ExecPath::kKernel);
    ctx->save_for_backward({x, w_ih, w_hh, w_hr, hprev, cprev, cnext, hraw, ws});
    ctx->saved_data["has_bias"] = b_ih.defined();
    ctx->saved_data["batch"] = B;
    save_config(ctx, cfg);
    if (!lstm) return {y, h};
    return {y, h, c};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static OpCounter& counter = op_counter(kBackwardOp);
    TORCH_CHECK(!at::GradMode::is_enabled(), kBackwardOp,
                ": the backward of LSTM and GRU on neuron is not differentiable (double backward "
                "is not supported)");
    const LayerConfig cfg = load_config(ctx);
    const bool lstm = cfg.cell == Cell::kLstm;
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w_ih = saved[1], &w_hh = saved[2], &w_hr = saved[3],
                     &hprev = saved[4], &cprev = saved[5], &cnext = saved[6], &hraw = saved[7],
                     &ws = saved[8];
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const int64_t H = cfg.hidden, G = gates_of(cfg.cell), N = cfg.steps->rows;
    const int64_t P = hprev.size(1);
    // Gradients arrive materialized (zeros for unused outputs).
    const at::Tensor grad_y = grads[0].contiguous();
    const int64_t batch = ctx->saved_data["batch"].toInt();
    const auto opts = x.options();
    at::Tensor dh = grads[1].clone(at::MemoryFormat::Contiguous);
    at::Tensor dc = lstm ? grads[2].clone(at::MemoryFormat::Contiguous) : at::Tensor();
    at::Tensor dy = at::empty({w_hr.defined() ? N : batch, P}, opts);
    at::Tensor dhraw = w_hr.defined() ? at::empty({batch, H}, opts) : at::Tensor();
    at::Tensor dgi = at::empty({N, G * H}, opts);
    at::Tensor dgh = lstm ? dgi : at::empty({N, G * H}, opts);
    at::Tensor ghx = lstm ? at::Tensor() : at::empty({batch, H}, opts);
    BackwardTask task{cfg,          *kernel_dtype(x.scalar_type()),
                      cpu_view(grad_y), cpu_view(w_hh),
                      cpu_view(w_hr),   cpu_view(hprev),
                      cpu_view(cprev),  cpu_view(cnext),
                      cpu_view(ws),     cpu_view(dh),
                      cpu_view(dc),     cpu_view(dy),
                      cpu_view(dhraw),  cpu_view(ghx),
                      cpu_view(dgi),    lstm ? at::Tensor() : cpu_view(dgh)};
    launch_cpu_kernels(x.device().index(), kBackwardOp, task_elements(batch, P, G, H),
                       /*matrix=*/true, std::move(task));
    counter.count(ExecPath::kKernel);
    // Gradients that do not depend on the step order: one product each.
    // needs_input_grad counts the tensors present: x, h0, [c0], w_ih, w_hh, [b_ih, b_hh], [w_hr].
    const int64_t w0 = lstm ? 3 : 2, b0 = w0 + 2, r0 = b0 + (has_bias ? 2 : 0);
    const bool want_x = ctx->needs_input_grad(0), want_wih = ctx->needs_input_grad(w0),
               want_whh = ctx->needs_input_grad(w0 + 1),
               want_whr = w_hr.defined() && ctx->needs_input_grad(r0);
    at::Tensor dx = want_x ? at::mm(dgi, w_ih) : at::Tensor();
    at::Tensor dw_ih = want_wih ? at::mm(dgi.t(), x) : at::Tensor();
    at::Tensor dw_hh = want_whh ? at::mm(dgh.t(), hprev) : at::Tensor();
    at::Tensor db_ih, db_hh;
    if (has_bias && ctx->needs_input_grad(b0)) db_ih = at::sum(dgi, {0});
    if (has_bias && ctx->needs_input_grad(b0 + 1)) db_hh = lstm && db_ih.defined() ? db_ih : at::sum(dgh, {0});
    at::Tensor dw_hr = want_whr ? at::mm(dy.t(), hraw) : at::Tensor();
    return {dx, dh, lstm ? dc : at::Tensor(), dw_ih, dw_hh, db_ih, db_hh, dw_hr, at::Tensor()};
  }

  // The layer's configuration, kept with the node as plain values.
  static void save_config(AutogradContext* ctx, const LayerConfig& cfg) {
    ctx->saved_data["lstm"] = cfg.cell == Cell::kLstm;
    ctx->saved_data["reverse"] = cfg.reverse;
    ctx->saved_data["hidden"] = cfg.hidden;
    ctx->saved_data["batch_sizes"] = cfg.steps->batch;
  }
  static LayerConfig load_config(AutogradContext* ctx) {
    LayerConfig cfg;
    cfg.cell = ctx->saved_data["lstm"].toBool() ? Cell::kLstm : Cell::kGru;
    cfg.reverse = ctx->saved_data["reverse"].toBool();
    cfg.hidden = ctx->saved_data["hidden"].toInt();
    cfg.steps = steps_of(ctx->saved_data["batch_sizes"].toIntVector());
    return cfg;
  }
};

// Why the fast path cannot take these arguments, or "" if it can. PyTorch's
// composite then runs them and raises its own errors for bad ones.
std::string unsupported(Cell cell, const at::Tensor& input, int64_t input_dim,
                        at::TensorList states, at::TensorList params, bool has_biases,
                        int64_t num_layers, bool bidirectional) {
  if (!input.is_privateuseone() || !kernel_dtype(input.scalar_type())) return "device or dtype";
  if (input.dim() != input_dim || input.numel() == 0) return "input shape";
  const int64_t D = bidirectional ? 2 : 1;
  for (const at::Tensor& t : states) {
    if (!t.defined() || t.device() != input.device() || t.scalar_type() != input.scalar_type() ||
        t.dim() != 3 || t.size(0) != num_layers * D) {
      return "states";
    }
  }
  const int64_t H = states.back().size(2), P = states[0].size(2);
  const bool proj = cell == Cell::kLstm && P != H;
  const int64_t per = 2 + (has_biases ? 2 : 0) + (proj ? 1 : 0), G = gates_of(cell);
  if (num_layers < 1 || int64_t(params.size()) != num_layers * D * per) return "params";
  for (const at::Tensor& t : params) {
    if (!t.defined() || t.device() != input.device() || t.scalar_type() != input.scalar_type() ||
        t.layout() != at::kStrided) {
      return "params";
    }
  }
  for (int64_t l = 0; l < num_layers; ++l) {
    const int64_t in = l == 0 ? input.size(input_dim - 1) : D * P;
    for (int64_t d = 0; d < D; ++d) {
      const at::Tensor* p = &params[(l * D + d) * per];
      if (p[0].sizes() != at::IntArrayRef{G * H, in} || p[1].sizes() != at::IntArrayRef{G * H, P}) {
        return "weights";
      }
      if (has_biases && (p[2].sizes() != at::IntArrayRef{G * H} || p[3].sizes() != p[2].sizes())) {
        return "biases";
      }
      if (proj && p[per - 1].sizes() != at::IntArrayRef{P, H}) return "projection";
    }
  }
  return "";
}

// The stack of layers: directions side by side, dropout between layers.
// Returns the output rows [N, D * P] and the final states [L * D, B, P|H].
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_stack(
    Cell cell, const at::Tensor& x, const std::shared_ptr<const Steps>& steps, const at::Tensor& h0,
    const at::Tensor& c0, at::TensorList params, bool has_biases, int64_t num_layers,
    double dropout, bool train, bool bidirectional) {
  const int64_t D = bidirectional ? 2 : 1;
  const int64_t H = (cell == Cell::kLstm ? c0 : h0).size(2);
  const bool proj = cell == Cell::kLstm && h0.size(2) != H;
  const int64_t per = 2 + (has_biases ? 2 : 0) + (proj ? 1 : 0);
  // Where every sequence has every step, CPU's own LSTM kernel (oneDNN) runs
  // the layers, as it does on CPU.
  const bool onednn =
      cell == Cell::kLstm && onednn_lstm_applies(x.scalar_type(), proj) &&
      std::all_of(steps->batch.begin(), steps->batch.end(),
                  [&](int64_t b) { return b == h0.size(1); });
  at::Tensor layer_in = x;
  std::vector<at::Tensor> hs, cs;
  for (int64_t l = 0; l < num_layers; ++l) {
    std::vector<at::Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const int64_t idx = l * D + d;
      const at::Tensor* p = &params[idx * per];
      using Opt = std::optional<at::Tensor>;
      if (onednn) {
        auto [y, hy, cy] = onednn_lstm_layer(
            layer_in, int64_t(steps->batch.size()), h0.select(0, idx), c0.select(0, idx), p[0],
            p[1], has_biases ? Opt(p[2]) : Opt(), has_biases ? Opt(p[3]) : Opt(), d == 1, train);
        outs.push_back(y);
        hs.push_back(hy);
        cs.push_back(cy);
        continue;
      }
      LayerConfig cfg{cell, d == 1, H, steps};
      variable_list r = RecurrentLayer::apply(
          layer_in, h0.select(0, idx), cell == Cell::kLstm ? Opt(c0.select(0, idx)) : Opt(),
          p[0], p[1], has_biases ? Opt(p[2]) : Opt(), has_biases ? Opt(p[3]) : Opt(),
          proj ? Opt(p[per - 1]) : Opt(), cfg);
      outs.push_back(r[0]);
      hs.push_back(r[1]);
      if (cell == Cell::kLstm) cs.push_back(r[2]);
    }
    layer_in = D == 1 ? outs[0] : at::cat(outs, 1);
    if (dropout != 0 && train && l < num_layers - 1) layer_in = at::dropout(layer_in, dropout, true);
  }
  return {layer_in, at::stack(hs, 0), cell == Cell::kLstm ? at::stack(cs, 0) : at::Tensor()};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_input(
    const at::Tensor& input, at::TensorList hx, at::TensorList params, bool has_biases,
    int64_t num_layers, double dropout, bool train, bool bidirectional, bool batch_first) {
  if (hx.size() != 2 || !unsupported(Cell::kLstm, input, 3, hx, params, has_biases, num_layers,
                                     bidirectional).empty()) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  }
  const at::Tensor seq = batch_first ? input.transpose(0, 1) : input;  // [T, B, I]
  const int64_t T = seq.size(0), B = seq.size(1);
  if (hx[0].size(1) != B || hx[1].size(1) != B) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);
  }
  auto [y, hy, cy] = run_stack(Cell::kLstm, seq.contiguous().view({T * B, seq.size(2)}),
                               padded_steps(T, B), hx[0], hx[1], params, has_biases, num_layers,
                               dropout, train, bidirectional);
  at::Tensor out = y.view({T, B, y.size(1)});
  return {batch_first ? out.transpose(0, 1) : out, hy, cy};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_data(
    const at::Tensor& data, const at::Tensor& batch_sizes, at::TensorList hx, at::TensorList params,
    bool has_biases, int64_t num_layers, double dropout, bool train, bool bidirectional) {
  std::shared_ptr<const Steps> steps;
  if (hx.size() == 2 &&
      unsupported(Cell::kLstm, data, 2, hx, params, has_biases, num_layers, bidirectional)
          .empty() &&
      hx[0].size(1) == hx[1].size(1)) {
    steps = packed_steps(batch_sizes, data.size(0), hx[0].size(1));
  }
  if (!steps) {
    return at::native::lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional);
  }
  return run_stack(Cell::kLstm, data.contiguous(), steps, hx[0], hx[1], params, has_biases,
                   num_layers, dropout, train, bidirectional);
}

std::tuple<at::Tensor, at::Tensor> gru_input(const at::Tensor& input, const at::Tensor& hx,
                                             at::TensorList params, bool has_biases,
                                             int64_t num_layers, double dropout, bool train,
                                             bool bidirectional, bool batch_first) {
  if (!unsupported(Cell::kGru, input, 3, {hx}, params, has_biases, num_layers, bidirectional)
           .empty() ||
      hx.size(1) != input.size(batch_first ? 0 : 1)) {
    return at::native::gru(input, hx, params, has_biases, num_layers, dropout, train,
                           bidirectional, batch_first);
  }
  const at::Tensor seq = batch_first ? input.transpose(0, 1) : input;
  const int64_t T = seq.size(0), B = seq.size(1);
  auto [y, hy, cy] = run_stack(Cell::kGru, seq.contiguous().view({T * B, seq.size(2)}),
                               padded_steps(T, B), hx, at::Tensor(), params, has_biases,
                               num_layers, dropout, train, bidirectional);
  at::Tensor out = y.view({T, B, y.size(1)});
  return {batch_first ? out.transpose(0, 1) : out, hy};
}

std::tuple<at::Tensor, at::Tensor> gru_data(const at::Tensor& data, const at::Tensor& batch_sizes,
                                            const at::Tensor& hx, at::TensorList params,
                                            bool has_biases, int64_t num_layers, double dropout,
                                            bool train, bool bidirectional) {
  std::shared_ptr<const Steps> steps;
  if (unsupported(Cell::kGru, data, 2, {hx}, params, has_biases, num_layers, bidirectional)
          .empty()) {
    steps = packed_steps(batch_sizes, data.size(0), hx.size(1));
  }
  if (!steps) {
    return at::native::gru(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train,
                           bidirectional);
  }
  auto [y, hy, cy] = run_stack(Cell::kGru, data.contiguous(), steps, hx, at::Tensor(), params,
                               has_biases, num_layers, dropout, train, bidirectional);
  return {y, hy};
}

}  // namespace torchneuron::native
