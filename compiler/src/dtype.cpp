#include "neuroncompiler/dtype.hpp"

#include <array>
#include <utility>

namespace neuroncompiler {
namespace {

struct DTypeInfo {
  std::string_view name;
  int64_t size;
};

constexpr std::array<DTypeInfo, kNumDTypes> kInfo{{
    {"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2},
    {"int64", 8}, {"int32", 4}, {"int16", 2}, {"int8", 1}, {"uint8", 1}, {"bool", 1},
    {"complex64", 8}, {"complex128", 16},
}};

// c10::ScalarType's numbering of the types above.
constexpr std::array<std::pair<int64_t, DType>, kNumDTypes> kScalarTypes{{
    {0, DType::kUInt8}, {1, DType::kInt8}, {2, DType::kInt16}, {3, DType::kInt32}, {4, DType::kInt64},
    {5, DType::kFloat16}, {6, DType::kFloat32}, {7, DType::kFloat64}, {9, DType::kComplex64},
    {10, DType::kComplex128}, {11, DType::kBool}, {15, DType::kBFloat16},
}};

}  // namespace

std::string_view dtype_name(DType t) { return kInfo[static_cast<int>(t)].name; }

int64_t dtype_size(DType t) { return kInfo[static_cast<int>(t)].size; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_scalar_type(int64_t code) {
  for (const auto& [number, type] : kScalarTypes) {
    if (number == code) return type;
  }
  return std::nullopt;
}

}  // namespace neuroncompiler
