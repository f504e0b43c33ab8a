// The tile interpreter's binary primitive over each kind of operand: a
// bfloat16 operand read where it lies (in the arithmetic's own loop, or
// widened first for the other ops) gives what its float32 widening gives, on
// both sides, with and without rounding the result to bfloat16.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "primitives.hpp"
#include "reference.hpp"

using namespace neuroncompiler;
using detail::BinaryOperand;

namespace {

// Values around 1 and 0 with a NaN, bfloat16-exact (as a bfloat16 load is).
std::vector<uint16_t> bfloat16_values(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float x = (static_cast<float>((i * 37 + seed * 11) % 101) - 50.f) / 16.f;
    v[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(nc_test::bf16_round(x)) >> 16);
  }
  v[n / 3] = 0x7fc0;  // NaN
  return v;
}

std::vector<float> widen(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = std::bit_cast<float>(static_cast<uint32_t>(v[i]) << 16);
  return out;
}

bool same(float x, float y) { return std::isnan(x) ? std::isnan(y) : std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); }

}  // namespace

TEST(Primitives, ABFloat16OperandGivesWhatItsWideningGivesForEveryBinaryOp) {
  const detail::Primitives& prims = detail::primitives();
  constexpr size_t kN = 2500;  // more than the widening path's pieces of 1024
  const std::vector<uint16_t> x = bfloat16_values(kN, 1), y = bfloat16_values(kN, 2);
  const std::vector<float> xf = widen(x), yf = widen(y);
  using Kind = BinaryOperand::Kind;
  for (int o = static_cast<int>(TileOp::kAdd); o < static_cast<int>(TileOp::kWhere); ++o) {
    const auto op = static_cast<TileOp>(o);
    for (bool round : {false, true}) {
      std::vector<float> want(kN), got(kN);
      prims.binary(op, {Kind::kTile, xf.data(), 0.f}, {Kind::kTile, yf.data(), 0.f}, round, want.data(), kN);
      const std::vector<std::pair<BinaryOperand, BinaryOperand>> forms = {
          {{Kind::kBFloat16, x.data(), 0.f}, {Kind::kTile, yf.data(), 0.f}},
          {{Kind::kTile, xf.data(), 0.f}, {Kind::kBFloat16, y.data(), 0.f}},
          {{Kind::kBFloat16, x.data(), 0.f}, {Kind::kBFloat16, y.data(), 0.f}}};
      for (size_t f = 0; f < forms.size(); ++f) {
        prims.binary(op, forms[f].first, forms[f].second, round, got.data(), kN);
        for (size_t i = 0; i < kN; ++i) {
          ASSERT_TRUE(same(got[i], want[i])) << tile_op_name(op) << " form " << f << " round " << round << " element " << i
                                             << ": " << got[i] << " vs " << want[i];
        }
      }
      // A scalar against a bfloat16 operand, on either side.
      std::vector<float> want_scalar(kN);
      prims.binary(op, {Kind::kScalar, nullptr, 1.5f}, {Kind::kTile, yf.data(), 0.f}, round, want_scalar.data(), kN);
      prims.binary(op, {Kind::kScalar, nullptr, 1.5f}, {Kind::kBFloat16, y.data(), 0.f}, round, got.data(), kN);
      for (size_t i = 0; i < kN; ++i) ASSERT_TRUE(same(got[i], want_scalar[i])) << tile_op_name(op) << " scalar first " << i;
      prims.binary(op, {Kind::kTile, xf.data(), 0.f}, {Kind::kScalar, nullptr, 1.5f}, round, want_scalar.data(), kN);
      prims.binary(op, {Kind::kBFloat16, x.data(), 0.f}, {Kind::kScalar, nullptr, 1.5f}, round, got.data(), kN);
      for (size_t i = 0; i < kN; ++i) ASSERT_TRUE(same(got[i], want_scalar[i])) << tile_op_name(op) << " scalar second " << i;
    }
  }
}
