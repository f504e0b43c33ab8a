// The attention kernels' bodies, compiled once per instruction-set level
// (attention_impl.cpp is built several times, each with its own NK_ISA
// namespace; see neuronkernels/isa.hpp); attention.cpp picks one at run time.
#pragma once

#include "neuronkernels/attention.hpp"

namespace neuronkernels {

#define NK_DECLARE_ISA(ns)                                                              \
  namespace ns {                                                                        \
  void forward(const AttentionParams& p, const View4& out, float* lse,                  \
               const ParallelFor& parallel_for);                                        \
  void backward(const AttentionParams& p, const View4& out, const float* lse,          \
                const View4& grad_out, const AttentionGrads& g,                         \
                const ParallelFor& parallel_for);                                       \
  }

NK_DECLARE_ISA(isa_avx512)
NK_DECLARE_ISA(isa_avx2)
NK_DECLARE_ISA(isa_baseline)

#undef NK_DECLARE_ISA

}  // namespace neuronkernels
