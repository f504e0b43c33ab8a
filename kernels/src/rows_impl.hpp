// The row kernels' bodies (row norms, the rotary embedding, argmax over
// rows), compiled once per instruction-set level (see neuronkernels/isa.hpp);
// norm.cpp, rope.cpp and argmax.cpp check arguments and pick one.
#pragma once

#include "neuronkernels/argmax.hpp"
#include "neuronkernels/norm.hpp"
#include "neuronkernels/rope.hpp"

namespace neuronkernels {

#define NK_ROWS_DECLARE(ns)                                              \
  namespace ns {                                                         \
  void row_norm(const RowNormParams& p, const ParallelFor& pf);          \
  void rope(const RopeParams& p, const ParallelFor& pf);                 \
  void argmax_rows(const ArgmaxParams& p, const ParallelFor& pf);        \
  }
NK_ROWS_DECLARE(isa_avx512)
NK_ROWS_DECLARE(isa_avx2)
NK_ROWS_DECLARE(isa_baseline)
#undef NK_ROWS_DECLARE

}  // namespace neuronkernels
