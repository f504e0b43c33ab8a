// The tile interpreter on hand-built tile programs (run_tile_program): the
// copies it leaves out (loads read in place, results written straight into
// their outputs, uniform values as scalars, shared tiles) and what keeps them
// safe when an output overlaps an input. Compiled graphs against the naive
// reference are in test_interpreter.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "neuroncompiler/interpreter.hpp"
#include "run_helpers.hpp"

using namespace nc_test;

// Hand-built tile programs over float32 rows of 2500 (two full tiles and a
// tail), for the copies the interpreter leaves out: contiguous float32 loads
// read in place, and results written straight into their outputs.
namespace {

TileInstr instr(TileOp op, int32_t dst, int32_t a = -1, int32_t b = -1) {
  TileInstr in;
  in.op = op;
  in.dst = dst;
  in.a = a;
  in.b = b;
  return in;
}

TileInstr memory(TileOp op, int32_t slot, int32_t operand) {
  TileInstr in;
  in.op = op;
  (op == TileOp::kLoad ? in.dst : in.a) = slot;
  in.operand = operand;
  return in;
}

TileProgram rows_program(int operands, std::vector<TileInstr> instrs, int32_t slots) {
  TileProgram p;
  p.shape = {3, 2500};
  for (int o = 0; o < operands; ++o) p.operands.push_back({o, DType::kFloat32, {2500, 1}});
  p.instrs = std::move(instrs);
  p.num_slots = slots;
  p.validate();
  return p;
}

std::vector<float> ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f * static_cast<float>(i) - 100.f;
  return v;
}

}  // namespace

TEST(TileCopies, AProgramWritingOverItsInputReadsTheInputsOldValues) {
  // x <- x + x; y <- x * x, with x's slot read after the store over x.
  const TileProgram p = rows_program(3, {memory(TileOp::kLoad, 0, 0), instr(TileOp::kAdd, 1, 0, 0),
                                         memory(TileOp::kStore, 1, 1), instr(TileOp::kMul, 2, 0, 0),
                                         memory(TileOp::kStore, 2, 2)}, 3);
  const std::vector<float> x0 = ramp(7500);
  std::vector<float> x = x0, y(7500, 0.f);
  run_tile_program(p, {x.data(), x.data(), y.data()}, threaded_for);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i], x0[i] + x0[i]) << i;
    ASSERT_EQ(y[i], x0[i] * x0[i]) << i;
  }
}

TEST(TileCopies, AResultWrittenIntoItsOutputIsReadAgainAndStoredTwice) {
  // y <- a + a; z <- y * y; w <- y (a second store of y's slot).
  const TileProgram p = rows_program(4, {memory(TileOp::kLoad, 0, 0), instr(TileOp::kAdd, 1, 0, 0),
                                         memory(TileOp::kStore, 1, 1), instr(TileOp::kMul, 2, 1, 1),
                                         memory(TileOp::kStore, 2, 2), memory(TileOp::kStore, 1, 3)}, 3);
  const std::vector<float> a = ramp(7500);
  std::vector<float> y(7500, 0.f), z(7500, 0.f), w(7500, 0.f);
  run_tile_program(p, {const_cast<float*>(a.data()), y.data(), z.data(), w.data()}, threaded_for);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(y[i], a[i] + a[i]) << i;
    ASSERT_EQ(z[i], y[i] * y[i]) << i;
    ASSERT_EQ(w[i], y[i]) << i;
  }
}

TEST(TileCopies, AnOutputOverTheSameMemoryAsAnInputIsWrittenAfterTheReads) {
  // out <- a - b where out is a's memory, and b is read after the store.
  const TileProgram p = rows_program(3, {memory(TileOp::kLoad, 0, 0), memory(TileOp::kLoad, 1, 1),
                                         instr(TileOp::kSub, 2, 0, 1), memory(TileOp::kStore, 2, 2),
                                         instr(TileOp::kAdd, 3, 1, 0), memory(TileOp::kStore, 3, 1)}, 4);
  const std::vector<float> a0 = ramp(7500);
  std::vector<float> a = a0, b(7500);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.5f * static_cast<float>(i % 7);
  const std::vector<float> b0 = b;
  run_tile_program(p, {a.data(), b.data(), a.data()}, threaded_for);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], a0[i] - b0[i]) << i;
    ASSERT_EQ(b[i], b0[i] + a0[i]) << i;
  }
}

TEST(TileCopies, AResultIsNotWrittenEarlyOverMemoryALaterLoadReads) {
  // s1 <- a * 2, then a is loaded again (as operand 1), then s1 is stored
  // over a, and the second load is stored to d: d must hold a's old values.
  const TileProgram p = rows_program(4, {memory(TileOp::kLoad, 0, 0), instr(TileOp::kMul, 1, 0, 0),
                                         memory(TileOp::kLoad, 2, 1), memory(TileOp::kStore, 1, 2),
                                         instr(TileOp::kNeg, 3, 2), memory(TileOp::kStore, 3, 3)}, 4);
  const std::vector<float> a0 = ramp(7500);
  std::vector<float> a = a0, d(7500, 0.f);
  run_tile_program(p, {a.data(), a.data(), a.data(), d.data()}, threaded_for);
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i], a0[i] * a0[i]) << i;
    ASSERT_EQ(d[i], -a0[i]) << i;
  }
}

TEST(TileCopies, AnInPlaceUpdateIsWrittenOnlyAfterTheLastReadOfItsInput) {
  // x <- -x with 2x stored elsewhere after it: the negation may not go into
  // x before the add has read x. Then x <- x * 3 alone, written in place.
  const TileProgram p = rows_program(3, {memory(TileOp::kLoad, 0, 0), instr(TileOp::kNeg, 1, 0),
                                         instr(TileOp::kAdd, 2, 0, 0), memory(TileOp::kStore, 1, 1),
                                         memory(TileOp::kStore, 2, 2)}, 3);
  const std::vector<float> x0 = ramp(7500);
  std::vector<float> x = x0, z(7500, 0.f);
  run_tile_program(p, {x.data(), x.data(), z.data()}, threaded_for);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(x[i], -x0[i]) << i;
    ASSERT_EQ(z[i], x0[i] + x0[i]) << i;
  }
  TileInstr three = instr(TileOp::kConst, 1);
  three.imm = 3.f;
  const TileProgram scale = rows_program(2, {memory(TileOp::kLoad, 0, 0), three, instr(TileOp::kMul, 2, 0, 1),
                                             memory(TileOp::kStore, 2, 1)}, 3);
  run_tile_program(scale, {x.data(), x.data()}, threaded_for);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], -x0[i] * 3.f) << i;
}

TEST(TileCopies, BFloat16LoadsOnlyArithmeticReadsAreReadWhereTheyLie) {
  // out1 <- z * y; x <- y - x (bfloat16, over x's memory); out2 <- x + x with
  // the old x; out3 <- max(y, y). z is read where it lies; y too would be but
  // for the max; x is copied, since a store over it comes before its last read.
  TileProgram p;
  p.shape = {3, 2500};
  const std::vector<int64_t> rows = {2500, 1};
  p.operands = {{0, DType::kBFloat16, rows}, {1, DType::kBFloat16, rows}, {2, DType::kBFloat16, rows},
                {3, DType::kFloat32, rows}, {0, DType::kBFloat16, rows}, {4, DType::kFloat32, rows},
                {5, DType::kFloat32, rows}};
  p.instrs = {memory(TileOp::kLoad, 0, 0), memory(TileOp::kLoad, 1, 1), memory(TileOp::kLoad, 2, 2),
              instr(TileOp::kMul, 3, 2, 1), memory(TileOp::kStore, 3, 3), instr(TileOp::kSub, 4, 1, 0),
              memory(TileOp::kStore, 4, 4), instr(TileOp::kAdd, 5, 0, 0), memory(TileOp::kStore, 5, 5),
              instr(TileOp::kMax, 6, 1, 1), memory(TileOp::kStore, 6, 6)};
  p.num_slots = 7;
  p.validate();
  auto bf16 = [](float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(bf16_round(v)) >> 16); };
  auto wide = [](uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); };
  std::vector<uint16_t> x(7500), y(7500), z(7500);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = bf16(0.25f * static_cast<float>(i % 97) - 12.f);
    y[i] = bf16(0.5f * static_cast<float>(i % 31) - 7.f);
    z[i] = bf16(0.125f * static_cast<float>(i % 13) + 1.f);
  }
  const std::vector<uint16_t> x0 = x;
  std::vector<float> out1(7500), out2(7500), out3(7500);
  run_tile_program(p, {x.data(), y.data(), z.data(), out1.data(), x.data(), out2.data(), out3.data()}, threaded_for);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(out1[i], wide(z[i]) * wide(y[i])) << i;
    ASSERT_EQ(x[i], bf16(wide(y[i]) - wide(x0[i]))) << i;
    ASSERT_EQ(out2[i], wide(x0[i]) + wide(x0[i])) << i;
    ASSERT_EQ(out3[i], wide(y[i])) << i;
  }
}

TEST(TileCopies, ConstantsAndUniformLoadsAreScalarsAndDeadTilesAreReused) {
  // out1 <- where(3, (3 - a) / 3 * u, a) with u one element broadcast over
  // everything (a 0-dim tensor); slot 0 is then written again: out2 <- (2 *
  // out1)^2; out3 <- 3, a constant stored (so also read as a tile).
  TileProgram p;
  p.shape = {3, 2500};
  p.operands = {{0, DType::kFloat32, {2500, 1}}, {1, DType::kFloat32, {0, 0}}, {2, DType::kFloat32, {2500, 1}},
                {3, DType::kFloat32, {2500, 1}}, {4, DType::kFloat32, {2500, 1}}};
  TileInstr three = instr(TileOp::kConst, 1);
  three.imm = 3.f;
  TileInstr choose = instr(TileOp::kWhere, 6, 5, 0);
  choose.c = 1;
  p.instrs = {memory(TileOp::kLoad, 0, 0), three, instr(TileOp::kSub, 2, 1, 0), instr(TileOp::kDiv, 3, 2, 1),
              memory(TileOp::kLoad, 4, 1), instr(TileOp::kMul, 5, 3, 4), choose, memory(TileOp::kStore, 6, 2),
              instr(TileOp::kAdd, 0, 6, 6), instr(TileOp::kMul, 7, 0, 0), memory(TileOp::kStore, 7, 3),
              memory(TileOp::kStore, 1, 4)};
  p.num_slots = 8;
  p.validate();
  const std::vector<float> a = ramp(7500);
  float u = 0.5f;
  std::vector<float> out1(7500, 0.f), out2(7500, 0.f), out3(7500, 0.f);
  run_tile_program(p, {const_cast<float*>(a.data()), &u, out1.data(), out2.data(), out3.data()}, threaded_for);
  for (size_t i = 0; i < a.size(); ++i) {
    const float want = (3.f - a[i]) / 3.f * 0.5f;
    ASSERT_EQ(out1[i], want) << i;
    ASSERT_EQ(out2[i], (want + want) * (want + want)) << i;
    ASSERT_EQ(out3[i], 3.f) << i;
  }
}

TEST(TileCopies, ShortRowsShareTilesWhateverTheirOperandsLayout) {
  // Over [R0, R1, 48], rows of 48 share tiles: out1 <- (a * b + c - d) * e
  // (float32, rows contiguous: written where it lies) and out2 <- a * b + c
  // (bfloat16, stored with the first two dimensions transposed), where a is
  // contiguous, b transposed, c contiguous bfloat16 (read where it lies), d
  // one value per row and e one value per column. Both sizes: one run on
  // the calling thread, and one split over threads with a partial last tile
  // of rows. Every value is a small integer, so each step is exact.
  for (const auto& [r0, r1] : std::vector<std::pair<int64_t, int64_t>>{{5, 7}, {9, 97}}) {
    SCOPED_TRACE(r0 * r1);
    constexpr int64_t kInner = 48;
    const int64_t rows = r0 * r1, n = rows * kInner;
    const std::vector<int64_t> contiguous = {r1 * kInner, kInner, 1}, transposed = {kInner, r0 * kInner, 1};
    TileProgram p;
    p.shape = {r0, r1, kInner};
    p.operands = {{0, DType::kFloat32, contiguous}, {1, DType::kFloat32, transposed},
                  {2, DType::kBFloat16, contiguous}, {3, DType::kFloat32, {r1, 1, 0}},
                  {4, DType::kFloat32, {0, 0, 1}},  {5, DType::kFloat32, contiguous},
                  {6, DType::kBFloat16, transposed}};
    p.instrs = {memory(TileOp::kLoad, 0, 0), memory(TileOp::kLoad, 1, 1), memory(TileOp::kLoad, 2, 2),
                memory(TileOp::kLoad, 3, 3), memory(TileOp::kLoad, 4, 4), instr(TileOp::kMul, 5, 0, 1),
                instr(TileOp::kAdd, 6, 5, 2), instr(TileOp::kSub, 7, 6, 3), instr(TileOp::kMul, 8, 7, 4),
                memory(TileOp::kStore, 8, 5), memory(TileOp::kStore, 6, 6)};
    p.num_slots = 9;
    p.validate();
    auto bf16 = [](float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16); };
    auto wide = [](uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); };
    std::vector<float> a(n), b(n), d(rows), e(kInner), out1(n, 0.f);
    std::vector<uint16_t> c(n), out2(n, 0);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = static_cast<float>(i % 7) - 3.f;
      b[i] = static_cast<float>(i % 5) + 1.f;
      c[i] = bf16(static_cast<float>(i % 11) - 5.f);
    }
    for (int64_t r = 0; r < rows; ++r) d[r] = static_cast<float>(r % 9);
    for (int64_t k = 0; k < kInner; ++k) e[k] = static_cast<float>(k % 3) - 1.f;
    for (const auto& pf : {neuronkernels::ParallelFor(neuronkernels::serial_for), neuronkernels::ParallelFor(threaded_for)}) {
      std::fill(out1.begin(), out1.end(), 0.f);
      std::fill(out2.begin(), out2.end(), uint16_t{0});
      run_tile_program(p, {a.data(), b.data(), c.data(), d.data(), e.data(), out1.data(), out2.data()}, pf);
      for (int64_t i = 0; i < r0; ++i) {
        for (int64_t j = 0; j < r1; ++j) {
          for (int64_t k = 0; k < kInner; ++k) {
            const int64_t at = (i * r1 + j) * kInner + k, across = (j * r0 + i) * kInner + k;
            const float sum = a[at] * b[across] + wide(c[at]);
            ASSERT_EQ(out1[at], (sum - d[i * r1 + j]) * e[k]) << i << " " << j << " " << k;
            ASSERT_EQ(out2[across], bf16(sum)) << i << " " << j << " " << k;
          }
        }
      }
    }
  }
}

TEST(TileCopies, AnInPlaceUpdateOverShortTransposedRowsReadsEveryRowBeforeWritingIt) {
  // x <- x * 3 + y over [64, 3, 40] where x is the transposed memory of
  // [3, 64, 40] and y is contiguous; then the same over x's own order.
  TileInstr three = instr(TileOp::kConst, 1);
  three.imm = 3.f;
  for (bool transposed : {true, false}) {
    SCOPED_TRACE(transposed);
    const std::vector<int64_t> xs = transposed ? std::vector<int64_t>{40, 64 * 40, 1} : std::vector<int64_t>{120, 40, 1};
    TileProgram p;
    p.shape = {64, 3, 40};
    p.operands = {{0, DType::kFloat32, xs}, {1, DType::kFloat32, {120, 40, 1}}, {0, DType::kFloat32, xs}};
    p.instrs = {memory(TileOp::kLoad, 0, 0), three, instr(TileOp::kMul, 2, 0, 1), memory(TileOp::kLoad, 3, 1),
                instr(TileOp::kAdd, 4, 2, 3), memory(TileOp::kStore, 4, 2)};
    p.num_slots = 5;
    p.validate();
    const std::vector<float> x0 = ramp(7680);
    std::vector<float> x = x0, y(7680);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(i % 13);
    run_tile_program(p, {x.data(), y.data(), x.data()}, threaded_for);
    for (int64_t i = 0; i < 64; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        for (int64_t k = 0; k < 40; ++k) {
          const int64_t at = i * xs[0] + j * xs[1] + k;
          ASSERT_EQ(x[at], x0[at] * 3.f + y[(i * 3 + j) * 40 + k]) << i << " " << j << " " << k;
        }
      }
    }
  }
}

TEST(TileCopies, TilesShortenForRunsWithManyLiveTiles) {
  for (const auto& [tiles, tile] : std::vector<std::pair<int32_t, int64_t>>{
           {0, 4096}, {1, 4096}, {8, 4096}, {9, 2048}, {16, 2048}, {17, 1024}, {64, 512}, {65, 256}, {5000, 256}}) {
    EXPECT_EQ(tile_elements(tiles), tile) << tiles << " tiles";
  }
}

TEST(Interpreter, RoundingToBFloat16IsToNearestEvenForEveryExponent) {
  // Every upper half of a float32 with lower halves at and around the
  // rounding boundary: NaNs stay NaN, the rest round as the reference.
  std::vector<float> x;
  for (uint32_t hi = 0; hi <= 0xffff; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      x.push_back(std::bit_cast<float>(hi << 16 | lo));
    }
  }
  TileProgram p;
  p.shape = {static_cast<int64_t>(x.size())};
  p.operands = {{0, DType::kFloat32, {1}}, {1, DType::kFloat32, {1}}};
  TileInstr round = instr(TileOp::kRoundTo, 1, 0);
  round.dtype = DType::kBFloat16;
  p.instrs = {memory(TileOp::kLoad, 0, 0), round, memory(TileOp::kStore, 1, 1)};
  p.num_slots = 2;
  p.validate();
  std::vector<float> got(x.size(), 0.f);
  run_tile_program(p, {x.data(), got.data()});
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]) & 0xffffu, 0u) << i;
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(bf16_round(x[i]))) << i;
  }
}
