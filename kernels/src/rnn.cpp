// Argument checks and the choice of instruction set for the recurrent cells.
#include <string>

#include "neuronkernels/isa.hpp"
#include "rnn_impl.hpp"

namespace neuronkernels {
namespace {

// Every row must hold `cols` elements: a row stride below that overlaps rows.
void check_rows(const char* op, const char* name, const Rows& r, int64_t batch, int64_t cols,
                bool optional = false) {
  if (batch == 0 || cols == 0) return;
  if (!r.data) {
    if (optional) return;
    throw KernelError(std::string(op) + ": " + name + " has no data");
  }
  if (batch > 1 && r.stride < cols) {
    throw KernelError(std::string(op) + ": " + name + " has row stride " + std::to_string(r.stride) +
                      ", below its " + std::to_string(cols) + " columns");
  }
}

void check_sizes(const char* op, int64_t batch, int64_t hidden) {
  if (batch < 0 || hidden < 0) {
    throw KernelError(std::string(op) + ": negative sizes (batch " + std::to_string(batch) +
                      ", hidden " + std::to_string(hidden) + ")");
  }
}

bool avx512() { return isa() >= Isa::kAvx512; }

}  // namespace

void lstm_cell_forward(const LstmCellForwardParams& p, const ParallelFor& pf) {
  const char* op = "lstm_cell_forward";
  check_sizes(op, p.batch, p.hidden);
  const int64_t B = p.batch, H = p.hidden;
  check_rows(op, "input_gates", p.input_gates, B, 4 * H);
  check_rows(op, "hidden_gates", p.hidden_gates, B, 4 * H);
  check_rows(op, "cx", p.cx, B, H);
  check_rows(op, "hy", p.hy, B, H);
  check_rows(op, "cy", p.cy, B, H);
  check_rows(op, "workspace", p.workspace, B, 4 * H);
  if (avx512()) return isa_avx512::lstm_cell_forward(p, pf);
  if (isa() == Isa::kAvx2) return isa_avx2::lstm_cell_forward(p, pf);
  return isa_baseline::lstm_cell_forward(p, pf);
}

void lstm_cell_backward(const LstmCellBackwardParams& p, const ParallelFor& pf) {
  const char* op = "lstm_cell_backward";
  check_sizes(op, p.batch, p.hidden);
  const int64_t B = p.batch, H = p.hidden;
  check_rows(op, "grad_hy", p.grad_hy, B, H, /*optional=*/true);
  check_rows(op, "grad_cy", p.grad_cy, B, H, /*optional=*/true);
  check_rows(op, "cx", p.cx, B, H);
  check_rows(op, "cy", p.cy, B, H);
  check_rows(op, "workspace", p.workspace, B, 4 * H);
  check_rows(op, "grad_gates", p.grad_gates, B, 4 * H);
  check_rows(op, "grad_cx", p.grad_cx, B, H);
  if (avx512()) return isa_avx512::lstm_cell_backward(p, pf);
  if (isa() == Isa::kAvx2) return isa_avx2::lstm_cell_backward(p, pf);
  return isa_baseline::lstm_cell_backward(p, pf);
}

void gru_cell_forward(const GruCellForwardParams& p, const ParallelFor& pf) {
  const char* op = "gru_cell_forward";
  check_sizes(op, p.batch, p.hidden);
  const int64_t B = p.batch, H = p.hidden;
  check_rows(op, "input_gates", p.input_gates, B, 3 * H);
  check_rows(op, "hidden_gates", p.hidden_gates, B, 3 * H);
  check_rows(op, "hx", p.hx, B, H);
  check_rows(op, "hy", p.hy, B, H);
  check_rows(op, "workspace", p.workspace, B, 5 * H);
  if (avx512()) return isa_avx512::gru_cell_forward(p, pf);
  if (isa() == Isa::kAvx2) return isa_avx2::gru_cell_forward(p, pf);
  return isa_baseline::gru_cell_forward(p, pf);
}

void gru_cell_backward(const GruCellBackwardParams& p, const ParallelFor& pf) {
  const char* op = "gru_cell_backward";
  check_sizes(op, p.batch, p.hidden);
  const int64_t B = p.batch, H = p.hidden;
  check_rows(op, "grad_hy", p.grad_hy, B, H);
  check_rows(op, "workspace", p.workspace, B, 5 * H);
  check_rows(op, "grad_input_gates", p.grad_input_gates, B, 3 * H);
  check_rows(op, "grad_hidden_gates", p.grad_hidden_gates, B, 3 * H);
  check_rows(op, "grad_hx", p.grad_hx, B, H);
  if (avx512()) return isa_avx512::gru_cell_backward(p, pf);
  if (isa() == Isa::kAvx2) return isa_avx2::gru_cell_backward(p, pf);
  return isa_baseline::gru_cell_backward(p, pf);
}

}  // namespace neuronkernels
