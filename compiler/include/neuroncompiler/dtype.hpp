// Element types of graph values, spelled as torch spells them ("float32",
// "bfloat16", ...): the serialized graph and program name dtypes by these
// names, and the torch glue maps them to its scalar types.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace neuroncompiler {

enum class DType : uint8_t {
  kFloat32, kFloat64, kFloat16, kBFloat16,
  kInt64, kInt32, kInt16, kInt8, kUInt8, kBool,
  kComplex64, kComplex128,
};

constexpr int kNumDTypes = 12;

std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
int64_t dtype_size(DType t);
// The type a dtype argument names: graphs pass c10::ScalarType's number, as
// boxed calls carry it (6 float32, 15 bfloat16, ...); nullopt for another.
std::optional<DType> dtype_from_scalar_type(int64_t code);

// Floating types the tile interpreter computes (in float32).
inline bool is_tile_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}
// Types the tile interpreter loads and stores (with conversion to float32).
inline bool is_tile_storable(DType t) {
  return is_tile_float(t) || t == DType::kInt64 || t == DType::kInt32 || t == DType::kBool ||
         t == DType::kUInt8 || t == DType::kInt8;
}

}  // namespace neuroncompiler
