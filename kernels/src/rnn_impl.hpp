// The recurrent cells' bodies, compiled once per instruction set (see
// neuronkernels/isa.hpp); rnn.cpp checks arguments and picks one.
#pragma once

#include "neuronkernels/rnn.hpp"

namespace neuronkernels {

#define NK_RNN_DECLARE(ns)                                                    \
  namespace ns {                                                              \
  void lstm_cell_forward(const LstmCellForwardParams& p, const ParallelFor& pf);   \
  void lstm_cell_backward(const LstmCellBackwardParams& p, const ParallelFor& pf); \
  void gru_cell_forward(const GruCellForwardParams& p, const ParallelFor& pf);     \
  void gru_cell_backward(const GruCellBackwardParams& p, const ParallelFor& pf);   \
  }
NK_RNN_DECLARE(isa_avx512)
NK_RNN_DECLARE(isa_avx2)
NK_RNN_DECLARE(isa_baseline)
#undef NK_RNN_DECLARE

}  // namespace neuronkernels
