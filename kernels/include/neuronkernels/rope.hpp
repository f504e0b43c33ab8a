// Rotary position embedding as the Llama family writes it:
//   out = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x2, x1)
// where x1 and x2 are the first and second halves of the last dimension.
// One pass over x instead of slices, a negation, a concatenation, two
// products and a sum.
//
// With `backward`, the gradient of x from the gradient g of out (passed as
// x): the rotation's transpose,
//   dx1 = g1 * cos1 + g2 * sin2,  dx2 = g2 * cos2 - g1 * sin1,
// rounded as autograd's graph of the same ops rounds it (g * sin, its halves
// swapped with one negated, plus g * cos), in place of the graph's products,
// negation, two slice_scatters into zeros and two sums. Each product and the sum are rounded to the output's
// type as eager rounds them (no fused multiply-add), so float32 results
// equal eager's bit for bit.
#pragma once

#include "neuronkernels/types.hpp"

namespace neuronkernels {

struct RopeParams {
  View4 x;    // [B, H, S, D], D even, stride 1 along D
  View4 cos;  // broadcast to x's sizes (stride 0 where broadcast), stride 1 along D
  View4 sin;  // like cos
  View4 out;  // x's sizes, stride 1 along D, not overlapping the inputs
  bool backward = false;
};

// Threads split the rows (B * H * S).
void rope(const RopeParams& p, const ParallelFor& parallel_for = serial_for);

}  // namespace neuronkernels
