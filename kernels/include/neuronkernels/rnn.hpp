// The pointwise part of recurrent cells: LSTM and GRU gates from the input
// and hidden projections (computed by a matrix product beforehand), and their
// backward. Semantics are PyTorch's fused cells (_thnn_fused_lstm_cell,
// _thnn_fused_gru_cell): gate order i, f, g, o for LSTM and r, z, n for GRU;
// float32 arithmetic for every storage type, one rounding per stored value.
#pragma once

#include <cstdint>

#include "neuronkernels/types.hpp"

namespace neuronkernels {

// Rows of `cols` elements, contiguous within a row, `stride` elements from one
// row to the next (so one step's rows can be a slice of a whole sequence).
struct Rows {
  void* data = nullptr;
  int64_t stride = 0;
};

// All buffers share `dtype`; biases are contiguous vectors (data null: none).
struct LstmCellForwardParams {
  DType dtype = DType::kFloat32;
  int64_t batch = 0, hidden = 0;
  Rows input_gates, hidden_gates;       // [batch, 4 * hidden]
  const void* input_bias = nullptr;     // [4 * hidden]
  const void* hidden_bias = nullptr;    // [4 * hidden]
  Rows cx;                              // [batch, hidden]
  Rows hy, cy;                          // [batch, hidden]
  Rows workspace;                       // [batch, 4 * hidden]: gates after activation
};

struct LstmCellBackwardParams {
  DType dtype = DType::kFloat32;
  int64_t batch = 0, hidden = 0;
  Rows grad_hy, grad_cy;  // [batch, hidden]; data null: zero
  Rows cx, cy;            // [batch, hidden]
  Rows workspace;         // the forward's gates [batch, 4 * hidden]
  Rows grad_gates;        // [batch, 4 * hidden]: gradient of the pre-activation gates
  Rows grad_cx;           // [batch, hidden]
};

struct GruCellForwardParams {
  DType dtype = DType::kFloat32;
  int64_t batch = 0, hidden = 0;
  Rows input_gates, hidden_gates;  // [batch, 3 * hidden]
  const void* input_bias = nullptr;
  const void* hidden_bias = nullptr;
  Rows hx;         // [batch, hidden]
  Rows hy;         // [batch, hidden]
  Rows workspace;  // [batch, 5 * hidden]: r, z, n, hx, hidden n-gate with its bias
};

struct GruCellBackwardParams {
  DType dtype = DType::kFloat32;
  int64_t batch = 0, hidden = 0;
  Rows grad_hy;                          // [batch, hidden]
  Rows workspace;                        // the forward's [batch, 5 * hidden]
  Rows grad_input_gates, grad_hidden_gates;  // [batch, 3 * hidden]
  Rows grad_hx;                          // [batch, hidden]
};

// Threads split the rows.
void lstm_cell_forward(const LstmCellForwardParams& p, const ParallelFor& parallel_for = serial_for);
void lstm_cell_backward(const LstmCellBackwardParams& p, const ParallelFor& parallel_for = serial_for);
void gru_cell_forward(const GruCellForwardParams& p, const ParallelFor& parallel_for = serial_for);
void gru_cell_backward(const GruCellBackwardParams& p, const ParallelFor& parallel_for = serial_for);

}  // namespace neuronkernels
