// The reduction kernels: out = src_0 op src_1 op ... in source order, so
// every rank that reduces the same sources gets the same bits.
#pragma once

#include <cstddef>

#include "neuroncoll/types.hpp"

namespace neuroncoll::algorithms {

// `out` may alias any source. `scales[j]` is source j's factor (PREMUL_SUM
// only); AVG divides the sum by `divisor`. float16/bfloat16 accumulate in
// float32 and round once to nearest-even; integer sums and products wrap.
// The caller checked op_supported(dtype, op).
void reduce(DType dtype, ReduceOp op, void* out, const void* const* srcs, const double* scales,
            int num_srcs, size_t count, int divisor);

// The conversions the kernels use (exposed for the tests).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace neuroncoll::algorithms
