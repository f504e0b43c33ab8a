// Element types and reduction operations of the collectives.
#pragma once

#include <cstddef>
#include <cstdint>

namespace neuroncoll {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,  // one byte, 0 or 1
};
inline constexpr int kNumDTypes = 10;

enum class ReduceOp : uint8_t {
  kSum,
  kAvg,         // sum divided by the group size (integers: truncating division)
  kProduct,
  kMin,
  kMax,
  kPremulSum,   // sum of each rank's input times that rank's factor (floating types only)
  kBitwiseAnd,  // integers and bool only
  kBitwiseOr,
  kBitwiseXor,
};
inline constexpr int kNumReduceOps = 9;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* reduce_op_name(ReduceOp op);
bool is_floating(DType dtype);
// Whether `op` is defined for `dtype` (bitwise ops need integers or bool,
// PREMUL_SUM needs a floating type, AVG is not defined for bool).
bool op_supported(DType dtype, ReduceOp op);

}  // namespace neuroncoll
