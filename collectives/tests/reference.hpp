// Test inputs and a scalar reference of every reduction, written apart from
// the library's kernels (float16 through the compiler's _Float16, bfloat16
// rounding by comparing neighbours in double).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "neuroncoll/types.hpp"

namespace nctest {

using neuroncoll::DType;
using neuroncoll::ReduceOp;

inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                       DType::kBFloat16, DType::kInt8,   DType::kInt16,
                                       DType::kInt32,   DType::kInt64,   DType::kUInt8,
                                       DType::kBool};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum,        ReduceOp::kAvg,       ReduceOp::kProduct,
                                       ReduceOp::kMin,        ReduceOp::kMax,       ReduceOp::kPremulSum,
                                       ReduceOp::kBitwiseAnd, ReduceOp::kBitwiseOr, ReduceOp::kBitwiseXor};

inline double premul_factor(int rank) { return 0.5 + 0.25 * rank; }

inline float ref_bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t ref_float_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xFFFF) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double dl = std::fabs(double(f) - double(ref_bf16_to_float(lo)));
  // Past the largest finite value, infinity stands for 2^128 when rounding.
  const double hv = (hi & 0x7FFF) == 0x7F80 ? std::copysign(std::ldexp(1.0, 128), double(f))
                                            : double(ref_bf16_to_float(hi));
  const double dh = std::fabs(hv - double(f));
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

inline uint16_t ref_float_to_half(float f) {
  _Float16 h = static_cast<_Float16>(f);
  return std::bit_cast<uint16_t>(h);
}
inline float ref_half_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

// A value of rank `rank` at index i, as a double the dtype can hold roughly.
inline double input_value(DType d, int rank, size_t i, int salt) {
  const int k = static_cast<int>((rank * 7 + i * 3 + salt * 5) % 11) - 5;
  switch (d) {
    case DType::kBool: return ((rank + i + salt) % 3) != 0 ? 1 : 0;
    case DType::kUInt8: return (rank * 31 + i * 17 + salt) % 200;
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64: return static_cast<double>(k * 23 + rank);
    default: return k * 0.3 + rank * 0.01;
  }
}

inline void store_value(DType d, double v, uint8_t* p) {
  switch (d) {
    case DType::kFloat32: { float f = float(v); std::memcpy(p, &f, 4); break; }
    case DType::kFloat64: std::memcpy(p, &v, 8); break;
    case DType::kFloat16: { uint16_t h = ref_float_to_half(float(v)); std::memcpy(p, &h, 2); break; }
    case DType::kBFloat16: { uint16_t b = ref_float_to_bf16(float(v)); std::memcpy(p, &b, 2); break; }
    case DType::kInt8: { int8_t x = int8_t(v); std::memcpy(p, &x, 1); break; }
    case DType::kInt16: { int16_t x = int16_t(v); std::memcpy(p, &x, 2); break; }
    case DType::kInt32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
    case DType::kInt64: { int64_t x = int64_t(v); std::memcpy(p, &x, 8); break; }
    case DType::kUInt8: { uint8_t x = uint8_t(v); std::memcpy(p, &x, 1); break; }
    case DType::kBool: { uint8_t x = v != 0; std::memcpy(p, &x, 1); break; }
  }
}

inline std::vector<uint8_t> make_input(DType d, int rank, size_t count, int salt = 0) {
  const size_t es = neuroncoll::dtype_size(d);
  std::vector<uint8_t> out(count * es + 1);
  for (size_t i = 0; i < count; ++i) store_value(d, input_value(d, rank, i, salt), out.data() + i * es);
  return out;
}

template <class T> T load_as(const uint8_t* p) { T v; std::memcpy(&v, p, sizeof(T)); return v; }

template <class A> A ref_apply(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: case ReduceOp::kPremulSum: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return a < b ? b : a;
    default: return a;
  }
}

// Floating: accumulate in Acc (float for the half types) in rank order.
template <class Acc>
Acc ref_float(ReduceOp op, const std::vector<Acc>& v, int n) {
  Acc acc = op == ReduceOp::kPremulSum ? v[0] * Acc(premul_factor(0)) : v[0];
  for (int j = 1; j < n; ++j) {
    acc = op == ReduceOp::kPremulSum ? acc + v[j] * Acc(premul_factor(j)) : ref_apply(op, acc, v[j]);
  }
  if (op == ReduceOp::kAvg) acc = acc / Acc(n);
  return acc;
}

template <class T>
T ref_int(ReduceOp op, const std::vector<T>& v, int n) {
  uint64_t sum = 0, prod = 1;
  T mn = v[0], mx = v[0], band = v[0], bor = v[0], bxor = v[0];
  for (int j = 0; j < n; ++j) {
    sum += static_cast<uint64_t>(static_cast<int64_t>(v[j]));
    prod *= static_cast<uint64_t>(static_cast<int64_t>(v[j]));
    if (j) {
      mn = v[j] < mn ? v[j] : mn;
      mx = v[j] > mx ? v[j] : mx;
      band = T(band & v[j]);
      bor = T(bor | v[j]);
      bxor = T(bxor ^ v[j]);
    }
  }
  switch (op) {
    case ReduceOp::kSum: return T(sum);
    case ReduceOp::kAvg: return T(int64_t(T(sum)) / n);
    case ReduceOp::kProduct: return T(prod);
    case ReduceOp::kMin: return mn;
    case ReduceOp::kMax: return mx;
    case ReduceOp::kBitwiseAnd: return band;
    case ReduceOp::kBitwiseOr: return bor;
    default: return bxor;
  }
}

// The expected result of reducing inputs[0..n) at every element.
inline std::vector<uint8_t> reference_reduce(DType d, ReduceOp op,
                                             const std::vector<std::vector<uint8_t>>& in,
                                             size_t count, size_t first = 0) {
  const int n = static_cast<int>(in.size());
  const size_t es = neuroncoll::dtype_size(d);
  std::vector<uint8_t> out(count * es + 1);
  for (size_t i = 0; i < count; ++i) {
    const size_t at = (first + i) * es;
    uint8_t* o = out.data() + i * es;
    switch (d) {
      case DType::kFloat32: case DType::kFloat16: case DType::kBFloat16: {
        std::vector<float> v(n);
        for (int j = 0; j < n; ++j) {
          const uint8_t* p = in[j].data() + at;
          v[j] = d == DType::kFloat32 ? load_as<float>(p)
                 : d == DType::kFloat16 ? ref_half_to_float(load_as<uint16_t>(p))
                                        : ref_bf16_to_float(load_as<uint16_t>(p));
        }
        const float r = ref_float<float>(op, v, n);
        if (d == DType::kFloat32) std::memcpy(o, &r, 4);
        else { uint16_t h = d == DType::kFloat16 ? ref_float_to_half(r) : ref_float_to_bf16(r); std::memcpy(o, &h, 2); }
        break;
      }
      case DType::kFloat64: {
        std::vector<double> v(n);
        for (int j = 0; j < n; ++j) v[j] = load_as<double>(in[j].data() + at);
        const double r = ref_float<double>(op, v, n);
        std::memcpy(o, &r, 8);
        break;
      }
#define NC_REF_INT(DT, T)                                                  \
  case DType::DT: {                                                        \
    std::vector<T> v(n);                                                   \
    for (int j = 0; j < n; ++j) v[j] = load_as<T>(in[j].data() + at);      \
    const T r = ref_int<T>(op, v, n);                                      \
    std::memcpy(o, &r, sizeof(T));                                         \
    break;                                                                 \
  }
      NC_REF_INT(kInt8, int8_t)
      NC_REF_INT(kInt16, int16_t)
      NC_REF_INT(kInt32, int32_t)
      NC_REF_INT(kInt64, int64_t)
      NC_REF_INT(kUInt8, uint8_t)
#undef NC_REF_INT
      case DType::kBool: {
        bool any = false, all = true, parity = false;
        for (int j = 0; j < n; ++j) {
          const bool b = in[j][at] != 0;
          any = any || b;
          all = all && b;
          parity = parity != b;
        }
        bool r = parity;
        if (op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kBitwiseOr) r = any;
        if (op == ReduceOp::kProduct || op == ReduceOp::kMin || op == ReduceOp::kBitwiseAnd) r = all;
        o[0] = r;
        break;
      }
    }
  }
  return out;
}

// "" if equal, else where and what.
inline std::string compare_bytes(DType d, const uint8_t* got, const uint8_t* want, size_t count,
                                 const std::string& what) {
  const size_t es = neuroncoll::dtype_size(d);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) != 0) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, got + i * es, es);
      std::memcpy(&w, want + i * es, es);
      return what + ": " + neuroncoll::dtype_name(d) + " element " + std::to_string(i) + " of " +
             std::to_string(count) + ": bits 0x" + std::to_string(g) + " expected 0x" + std::to_string(w);
    }
  }
  return "";
}

}  // namespace nctest
