// The tile interpreter's primitives (src/primitives.hpp), compiled once per
// instruction-set level. Plain loops over float32 tiles that GCC vectorizes
// at the level's width. exp, erf and tanh (so sigmoid, silu and both GELUs)
// are branch-free polynomials that vectorize; log, sin, cos and pow call the
// C library per element.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "primitives.hpp"

#include "isa_region_begin.hpp"

namespace neuroncompiler::NK_ISA {
namespace {

using detail::BinaryOperand;
using detail::Primitives;

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// float_to_bf16 then back, within 32-bit lanes: the loop then stays in one
// vector width (packing to 16 bits and widening again cost 2x).
inline float round_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (u | 0x400000u) & 0xffff0000u;
  return std::bit_cast<float>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// exp by range reduction x = n ln2 + r and a degree-6 polynomial on r
// (branch-free, so loops over it vectorize); within 2 ulp of expf.
inline float exp_poly(float x) {
  constexpr float kHi = 88.7228391f, kLo = -87.3365479f;
  const float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  const float t = xc * 1.44269504088896341f;
  const float n = (t + 12582912.f) - 12582912.f;  // round to nearest
  const float r = xc - n * 0.693359375f - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // two factors keep 2^n in range at both ends
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float e = y * s1 * s2;
  return x > kHi ? std::numeric_limits<float>::infinity() : (x < kLo ? 0.f : e);
}

inline float sigmoid(float x) { return 1.f / (1.f + exp_poly(-x)); }

// erf: for |x| < 0.5 its odd Taylor series through x^15 (the next term is below
// 1e-10 there); above, erf = 1 - erfc with erfc from the Chebyshev fit of
// Numerical Recipes (relative error below 1.2e-7) over exp_poly. Both are
// computed and one selected, so the loop stays branch-free; within 4 ulp of the
// float64 erf (tests/test_interpreter.cpp).
inline float erf_poly(float x) {
  const float a = std::fabs(x);
  const float x2 = x * x;
  float s = -1.492565035840625e-05f;
  s = s * x2 + 1.2055332981789664e-04f;
  s = s * x2 - 8.548327023450852e-04f;
  s = s * x2 + 5.223977625442188e-03f;
  s = s * x2 - 2.6866170645131252e-02f;
  s = s * x2 + 1.1283791670955126e-01f;
  s = s * x2 - 3.7612638903183754e-01f;
  s = s * x2 + 1.1283791670955126f;
  const float small = x * s;
  const float t = 1.f / (1.f + 0.5f * a);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float erfc = t * exp_poly(p - a * a);
  const float large = std::copysign(1.f - erfc, x);
  return a < 0.5f ? small : large;
}

// tanh: for |x| < 0.55 its odd Taylor series through x^19 (the next term is
// below 2e-9 relative there), where 1 - 2 / (e^2|x| + 1) would cancel; above,
// that formula over exp_poly, which saturates to 1 for large |x|.
inline float tanh_poly(float x) {
  const float a = std::fabs(x);
  const float x2 = x * x;
  float s = -2.3912911424355248e-04f;
  s = s * x2 + 5.90027440945586e-04f;
  s = s * x2 - 1.4558343870513183e-03f;
  s = s * x2 + 3.592128036572481e-03f;
  s = s * x2 - 8.863235529902197e-03f;
  s = s * x2 + 2.1869488536155203e-02f;
  s = s * x2 - 5.396825396825397e-02f;
  s = s * x2 + 1.3333333333333333e-01f;
  s = s * x2 - 3.333333333333333e-01f;
  s = s * x2 + 1.f;
  const float small = x * s;
  const float large = std::copysign(1.f - 2.f / (exp_poly(2.f * a) + 1.f), x);
  return a < 0.55f ? small : large;
}

template <typename T, typename Convert>
void load_as(const void* src, int64_t stride, float* dst, int64_t n, Convert convert) {
  const T* s = static_cast<const T*>(src);
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = convert(s[i]);
  } else if (stride == 0) {
    const float v = n > 0 ? convert(s[0]) : 0.f;
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = convert(s[i * stride]);
  }
}

template <typename T, typename Convert>
void store_as(const float* src, void* dst, int64_t stride, int64_t n, Convert convert) {
  T* d = static_cast<T*>(dst);
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = convert(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * stride] = convert(src[i]);
  }
}

// Calls f(T{}, convert) with the storage type of `dtype` and its conversion
// to float32.
template <typename F>
void with_load_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{}, [](float v) { return v; });
    case DType::kBFloat16: return f(uint16_t{}, bf16_to_float);
    case DType::kFloat16: return f(_Float16{}, [](_Float16 v) { return static_cast<float>(v); });
    case DType::kInt64: return f(int64_t{}, [](int64_t v) { return static_cast<float>(v); });
    case DType::kInt32: return f(int32_t{}, [](int32_t v) { return static_cast<float>(v); });
    case DType::kInt8: return f(int8_t{}, [](int8_t v) { return static_cast<float>(v); });
    case DType::kUInt8:
    case DType::kBool: return f(uint8_t{}, [](uint8_t v) { return static_cast<float>(v); });
    default: return;  // TileProgram::validate refuses the rest
  }
}

// Calls f(T{}, convert) with the storage type of `dtype` and the conversion
// from float32 to it.
template <typename F>
void with_store_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{}, [](float v) { return v; });
    case DType::kBFloat16: return f(uint16_t{}, float_to_bf16);
    case DType::kFloat16: return f(_Float16{}, [](float v) { return static_cast<_Float16>(v); });
    case DType::kInt64: return f(int64_t{}, [](float v) { return static_cast<int64_t>(v); });
    case DType::kInt32: return f(int32_t{}, [](float v) { return static_cast<int32_t>(v); });
    case DType::kInt8: return f(int8_t{}, [](float v) { return static_cast<int8_t>(static_cast<int32_t>(v)); });
    case DType::kUInt8: return f(uint8_t{}, [](float v) { return static_cast<uint8_t>(static_cast<int32_t>(v)); });
    case DType::kBool: return f(uint8_t{}, [](float v) { return static_cast<uint8_t>(v != 0.f); });
    default: return;
  }
}

void load(DType dtype, const void* src, int64_t stride, float* dst, int64_t n) {
  with_load_type(dtype, [&](auto tag, auto convert) { load_as<decltype(tag)>(src, stride, dst, n, convert); });
}

void store(DType dtype, const float* src, void* dst, int64_t stride, int64_t n) {
  with_store_type(dtype, [&](auto tag, auto convert) { store_as<decltype(tag)>(src, dst, stride, n, convert); });
}

void load_rows(DType dtype, const void* base, const int64_t* offsets, int64_t offsets_step, int64_t rows,
               int64_t stride, float* dst, int64_t n) {
  with_load_type(dtype, [&](auto tag, auto convert) {
    using T = decltype(tag);
    for (int64_t r = 0; r < rows; ++r) {
      load_as<T>(static_cast<const T*>(base) + offsets[r * offsets_step], stride, dst + r * n, n, convert);
    }
  });
}

void store_rows(DType dtype, const float* src, void* base, const int64_t* offsets, int64_t offsets_step,
                int64_t rows, int64_t stride, int64_t n) {
  with_store_type(dtype, [&](auto tag, auto convert) {
    using T = decltype(tag);
    for (int64_t r = 0; r < rows; ++r) {
      store_as<T>(src + r * n, static_cast<T*>(base) + offsets[r * offsets_step], stride, n, convert);
    }
  });
}

void fill(float value, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = value;
}

// kRound: as map2's.
template <bool kRound = false, typename F>
inline void map1(const float* a, float* d, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = f(a[i]);
    d[i] = kRound ? round_to_bf16(v) : v;
  }
}

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::kBFloat16: return round_to_bf16(v);
    case DType::kFloat16: return static_cast<float>(static_cast<_Float16>(v));
    case DType::kBool: return v != 0.f ? 1.f : 0.f;
    case DType::kInt64:
    case DType::kInt32: return std::trunc(v);
    case DType::kInt8: return static_cast<float>(static_cast<int8_t>(static_cast<int32_t>(v)));
    case DType::kUInt8: return static_cast<float>(static_cast<uint8_t>(static_cast<int32_t>(v)));
    default: return v;
  }
}

// The unary ops but kRoundTo, each result rounded to bfloat16 when kRound.
template <bool kRound>
void math1(TileOp op, const float* a, float* d, int64_t n) {
  switch (op) {
    case TileOp::kNeg: return map1<kRound>(a, d, n, [](float x) { return -x; });
    case TileOp::kAbs: return map1<kRound>(a, d, n, [](float x) { return std::fabs(x); });
    case TileOp::kExp: return map1<kRound>(a, d, n, exp_poly);
    case TileOp::kLog: return map1<kRound>(a, d, n, [](float x) { return std::log(x); });
    case TileOp::kSqrt: return map1<kRound>(a, d, n, [](float x) { return std::sqrt(x); });
    case TileOp::kRsqrt: return map1<kRound>(a, d, n, [](float x) { return 1.f / std::sqrt(x); });
    case TileOp::kRelu: return map1<kRound>(a, d, n, [](float x) { return x > 0.f ? x : (x != x ? x : 0.f); });
    case TileOp::kSigmoid: return map1<kRound>(a, d, n, sigmoid);
    case TileOp::kTanh: return map1<kRound>(a, d, n, tanh_poly);
    case TileOp::kSilu: return map1<kRound>(a, d, n, [](float x) { return x * sigmoid(x); });
    case TileOp::kGelu:
      return map1<kRound>(a, d, n, [](float x) { return 0.5f * x * (1.f + erf_poly(x * 0.70710678118654752f)); });
    case TileOp::kGeluTanh:
      return map1<kRound>(a, d, n, [](float x) {
        return 0.5f * x * (1.f + tanh_poly(0.79788456080286536f * (x + 0.044715f * x * x * x)));
      });
    case TileOp::kReciprocal: return map1<kRound>(a, d, n, [](float x) { return 1.f / x; });
    case TileOp::kSin: return map1<kRound>(a, d, n, [](float x) { return std::sin(x); });
    case TileOp::kCos: return map1<kRound>(a, d, n, [](float x) { return std::cos(x); });
    case TileOp::kErf: return map1<kRound>(a, d, n, erf_poly);
    case TileOp::kLogicalNot: return map1<kRound>(a, d, n, [](float x) { return x == 0.f ? 1.f : 0.f; });
    default: return;
  }
}

void unary(TileOp op, DType dtype, const float* a, bool round_bf16, float* d, int64_t n) {
  switch (op) {
    case TileOp::kRoundTo:
      // One loop per type: a switch per element kept the loop scalar (3x
      // slower than eager for comparisons stored as bool).
      switch (dtype) {
        case DType::kBFloat16: return map1(a, d, n, [](float x) { return round_to(DType::kBFloat16, x); });
        case DType::kFloat16: return map1(a, d, n, [](float x) { return round_to(DType::kFloat16, x); });
        case DType::kBool: return map1(a, d, n, [](float x) { return round_to(DType::kBool, x); });
        case DType::kInt64:
        case DType::kInt32: return map1(a, d, n, [](float x) { return round_to(DType::kInt32, x); });
        case DType::kInt8: return map1(a, d, n, [](float x) { return round_to(DType::kInt8, x); });
        case DType::kUInt8: return map1(a, d, n, [](float x) { return round_to(DType::kUInt8, x); });
        default: return map1(a, d, n, [](float x) { return x; });
      }
    default:
      if (round_bf16) return math1<true>(op, a, d, n);
      return math1<false>(op, a, d, n);
  }
}

// Element i of a binary op's operand: a tile's element, or one value for
// every element (a constant operand, which then needs no tile of its own).
struct FromTile {
  const float* p;
  float operator()(int64_t i) const { return p[i]; }
};
struct FromScalar {
  float v;
  float operator()(int64_t) const { return v; }
};
// A contiguous bfloat16 operand read where it lies, widened in the loop (a
// bfloat16 group's load then needs no pass of its own).
struct FromBFloat16 {
  const uint16_t* p;
  float operator()(int64_t i) const { return bf16_to_float(p[i]); }
};

// kRound: the result rounded to bfloat16 in the same pass (a bfloat16 op's
// result, which eager rounds before anything reads it).
template <bool kRound, typename A, typename B, typename F>
inline void map2(A a, B b, float* d, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = f(a(i), b(i));
    d[i] = kRound ? round_to_bf16(v) : v;
  }
}

template <bool kRound, typename A, typename B>
void arithmetic_of(TileOp op, A a, B b, float* d, int64_t n) {
  switch (op) {
    case TileOp::kAdd: return map2<kRound>(a, b, d, n, [](float x, float y) { return x + y; });
    case TileOp::kSub: return map2<kRound>(a, b, d, n, [](float x, float y) { return x - y; });
    case TileOp::kMul: return map2<kRound>(a, b, d, n, [](float x, float y) { return x * y; });
    case TileOp::kDiv: return map2<kRound>(a, b, d, n, [](float x, float y) { return x / y; });
    default: return;
  }
}

template <bool kRound, typename A, typename B>
void binary_of(TileOp op, A a, B b, float* d, int64_t n) {
  switch (op) {
    case TileOp::kAdd: case TileOp::kSub: case TileOp::kMul: case TileOp::kDiv:
      return arithmetic_of<kRound>(op, a, b, d, n);
    // NaN propagates, as torch.maximum / minimum do.
    case TileOp::kMax: return map2<kRound>(a, b, d, n, [](float x, float y) { return x != x ? x : (y != y ? y : (x > y ? x : y)); });
    case TileOp::kMin: return map2<kRound>(a, b, d, n, [](float x, float y) { return x != x ? x : (y != y ? y : (x < y ? x : y)); });
    case TileOp::kPow: return map2<kRound>(a, b, d, n, [](float x, float y) { return std::pow(x, y); });
    case TileOp::kEq: return map2<kRound>(a, b, d, n, [](float x, float y) { return x == y ? 1.f : 0.f; });
    case TileOp::kNe: return map2<kRound>(a, b, d, n, [](float x, float y) { return x != y ? 1.f : 0.f; });
    case TileOp::kLt: return map2<kRound>(a, b, d, n, [](float x, float y) { return x < y ? 1.f : 0.f; });
    case TileOp::kLe: return map2<kRound>(a, b, d, n, [](float x, float y) { return x <= y ? 1.f : 0.f; });
    case TileOp::kGt: return map2<kRound>(a, b, d, n, [](float x, float y) { return x > y ? 1.f : 0.f; });
    case TileOp::kGe: return map2<kRound>(a, b, d, n, [](float x, float y) { return x >= y ? 1.f : 0.f; });
    case TileOp::kLogicalAnd: return map2<kRound>(a, b, d, n, [](float x, float y) { return (x != 0.f && y != 0.f) ? 1.f : 0.f; });
    case TileOp::kLogicalOr: return map2<kRound>(a, b, d, n, [](float x, float y) { return (x != 0.f || y != 0.f) ? 1.f : 0.f; });
    // The activations' backwards in one pass each: the formulas of the chains
    // of tile ops they replace (eleven for GELU, seven for SiLU), within their
    // roundings (a product and a sum may become a multiply-add).
    case TileOp::kGeluBackward:  // grad * (Phi(x) + x * phi(x))
      return map2<kRound>(a, b, d, n, [](float grad, float x) {
        const float cdf = 0.5f * (1.f + erf_poly(x * 0.70710678118654752f));
        const float pdf = 0.39894228040143268f * exp_poly((x * x) * -0.5f);
        return grad * (cdf + x * pdf);
      });
    case TileOp::kSiluBackward:  // grad * s * (1 + x * (1 - s)), s = sigmoid(x)
      return map2<kRound>(a, b, d, n, [](float grad, float x) {
        const float s = sigmoid(x);
        return (grad * s) * (1.f + x * (1.f - s));
      });
    default: return;
  }
}

template <bool kRound, typename A, typename B>
void binary_pick(TileOp op, A a, B b, float* d, int64_t n) {
  if constexpr (std::is_same_v<A, FromBFloat16> || std::is_same_v<B, FromBFloat16>) {
    arithmetic_of<kRound>(op, a, b, d, n);
  } else {
    binary_of<kRound>(op, a, b, d, n);
  }
}

template <bool kRound, typename A>
void binary_with(TileOp op, A a, const BinaryOperand& b, float* d, int64_t n) {
  switch (b.kind) {
    case BinaryOperand::Kind::kTile: return binary_pick<kRound>(op, a, FromTile{static_cast<const float*>(b.data)}, d, n);
    case BinaryOperand::Kind::kScalar: return binary_pick<kRound>(op, a, FromScalar{b.value}, d, n);
    case BinaryOperand::Kind::kBFloat16:
      return binary_pick<kRound>(op, a, FromBFloat16{static_cast<const uint16_t*>(b.data)}, d, n);
  }
}

template <bool kRound>
void binary_dispatch(TileOp op, const BinaryOperand& a, const BinaryOperand& b, float* d, int64_t n) {
  switch (a.kind) {
    case BinaryOperand::Kind::kTile: return binary_with<kRound>(op, FromTile{static_cast<const float*>(a.data)}, b, d, n);
    case BinaryOperand::Kind::kScalar: return binary_with<kRound>(op, FromScalar{a.value}, b, d, n);
    case BinaryOperand::Kind::kBFloat16:
      return binary_with<kRound>(op, FromBFloat16{static_cast<const uint16_t*>(a.data)}, b, d, n);
  }
}

// A bfloat16 operand of another op is widened into `buffer` first.
BinaryOperand widened(const BinaryOperand& x, int64_t offset, float* buffer, int64_t n) {
  switch (x.kind) {
    case BinaryOperand::Kind::kTile: return {x.kind, static_cast<const float*>(x.data) + offset, 0.f};
    case BinaryOperand::Kind::kScalar: return x;
    case BinaryOperand::Kind::kBFloat16: {
      const auto* p = static_cast<const uint16_t*>(x.data) + offset;
      for (int64_t i = 0; i < n; ++i) buffer[i] = bf16_to_float(p[i]);
      return {BinaryOperand::Kind::kTile, buffer, 0.f};
    }
  }
  return x;
}

void binary(TileOp op, const BinaryOperand& a, const BinaryOperand& b, bool round_bf16, float* d, int64_t n) {
  const bool bf16 = a.kind == BinaryOperand::Kind::kBFloat16 || b.kind == BinaryOperand::Kind::kBFloat16;
  if (bf16 && !detail::reads_bfloat16_in_its_loop(op)) {
    constexpr int64_t kPiece = 1024;
    float a_buffer[kPiece], b_buffer[kPiece];
    for (int64_t i0 = 0; i0 < n; i0 += kPiece) {
      const int64_t m = n - i0 < kPiece ? n - i0 : kPiece;
      binary(op, widened(a, i0, a_buffer, m), widened(b, i0, b_buffer, m), round_bf16, d + i0, m);
    }
    return;
  }
  if (round_bf16) return binary_dispatch<true>(op, a, b, d, n);
  binary_dispatch<false>(op, a, b, d, n);
}

void where(const float* c, const float* a, const float* b, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = c[i] != 0.f ? a[i] : b[i];
}

// Eight partial sums (one vector's worth of lanes on AVX2) keep the loop
// vectorized without reassociating a single accumulator.
double sum(const float* a, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j];
  }
  double total = 0;
  for (int j = 0; j < 8; ++j) total += acc[j];
  for (; i < n; ++i) total += a[i];
  return total;
}

// One vector of lane maxima and a vector of NaN flags (GCC vector extensions:
// the loop with a NaN check per element stayed scalar and ran 10x slower than
// ATen's amax over rows of 32000). Any NaN makes the result NaN, as in eager.
float max(const float* a, int64_t n) {
  using Floats = float __attribute__((vector_size(NK_VEC_LANES * sizeof(float))));
  using Flags = int32_t __attribute__((vector_size(NK_VEC_LANES * sizeof(float))));
  constexpr float kLow = -std::numeric_limits<float>::infinity();
  Floats acc = Floats{} + kLow;
  Flags nan = {};
  int64_t i = 0;
  for (; i + NK_VEC_LANES <= n; i += NK_VEC_LANES) {
    Floats x;
    std::memcpy(&x, a + i, sizeof x);
    acc = x > acc ? x : acc;
    nan |= x != x;
  }
  float m = kLow;
  bool any_nan = false;
  for (int j = 0; j < NK_VEC_LANES; ++j) {
    m = acc[j] > m ? acc[j] : m;
    any_nan |= nan[j] != 0;
  }
  for (; i < n; ++i) {
    m = a[i] > m ? a[i] : m;
    any_nan |= a[i] != a[i];
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

}  // namespace

extern const Primitives kPrimitives;
const Primitives kPrimitives{&load, &store, &load_rows, &store_rows, &fill, &unary, &binary, &where, &sum, &max};

}  // namespace neuroncompiler::NK_ISA

#include "isa_region_end.hpp"
