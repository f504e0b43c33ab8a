// The tile interpreter, through compile + run, against the naive scalar
// reference: every storable dtype, broadcast and non-contiguous inputs,
// zero-size tensors, trailing reductions, tiles split over threads, and
// random pointwise graphs.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "graph_builder.hpp"
#include "neuroncompiler/fusion.hpp"
#include "neuroncompiler/interpreter.hpp"
#include "run_helpers.hpp"

using namespace nc_test;

namespace {

double tolerance(DType t) {
  switch (t) {
    case DType::kBFloat16: return 1.0 / 64;
    case DType::kFloat16: return 1.0 / 512;
    case DType::kFloat32: return 2e-6;
    default: return 0;
  }
}

void expect_matches(const Graph& g, const CompiledRun& r, const Reference& ref) {
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int32_t id = g.outputs[i];
    const std::vector<double> got = r.output(i);
    const std::vector<double>& want = ref[id];
    ASSERT_EQ(got.size(), want.size());
    const double tol = tolerance(g.value(id).layout.dtype);
    for (size_t e = 0; e < got.size(); ++e) {
      if (std::isnan(want[e])) {
        EXPECT_TRUE(std::isnan(got[e])) << "output " << i << " element " << e;
        continue;
      }
      ASSERT_NEAR(got[e], want[e], tol * (1 + std::fabs(want[e]))) << "output " << i << " element " << e;
    }
  }
}

void check(const Graph& g, unsigned seed = 1, const neuronkernels::ParallelFor& pf = neuronkernels::serial_for) {
  const CompiledRun r = compile_and_run(g, nullptr, seed, pf);
  const Reference ref(g, input_pointers(r));
  expect_matches(g, r, ref);
}

Arg one() { return Arg::integer(1); }

}  // namespace

class EveryFloatType : public ::testing::TestWithParam<DType> {};

TEST_P(EveryFloatType, ChainWithBroadcastAndNonContiguousInput) {
  const DType t = GetParam();
  GraphBuilder b;
  const int32_t x = b.input(t, {37, 2300});
  const int32_t bias = b.input(t, {2300});
  const int32_t wt = b.input(t, {2300, 37}, {1, 2300});  // transposed memory
  const int32_t w = b.view(wt, {37, 2300}, {1, 37});
  const int32_t y = b.node("aten::add.Tensor", {T(x), T(bias), one()}, t, {37, 2300});
  const int32_t z = b.node("aten::mul.Tensor", {T(y), T(w)}, t, {37, 2300});
  const int32_t e = b.node("aten::sigmoid.default", {T(z)}, t, {37, 2300});
  const int32_t f = b.node("aten::sub.Tensor", {T(e), Arg::real(0.25), Arg::real(2.0)}, t, {37, 2300});
  b.output(f);
  b.output(y);
  check(b.build());
  (void)w;
}

TEST_P(EveryFloatType, TrailingReductions) {
  const DType t = GetParam();
  for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim", "aten::amax.default"}) {
    for (bool keepdim : {false, true}) {
      GraphBuilder b;
      const int32_t x = b.input(t, {5, 3, 2300});
      const int32_t e = b.node("aten::exp.default", {T(x)}, t, {5, 3, 2300});
      std::vector<int64_t> out_sizes = keepdim ? std::vector<int64_t>{5, 3, 1} : std::vector<int64_t>{5, 3};
      std::vector<Arg> args = {T(e), Arg::int_list({2}), Arg::boolean(keepdim)};
      if (std::string(op) != "aten::amax.default") args.push_back(Arg::none());
      const int32_t s = b.node(op, args, t, out_sizes);
      b.output(s);
      SCOPED_TRACE(op);
      check(b.build());
    }
  }
}

TEST_P(EveryFloatType, ReductionsToFloat32RunInTheGroup) {
  // sum(x, -1, dtype=torch.float32) and mean(..., dtype=torch.float32) (TRL's
  // LM head): the interpreter sums in float32 anyway, so the group takes them.
  const DType t = GetParam();
  for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim"}) {
    GraphBuilder b;
    const int32_t x = b.input(t, {5, 2300});
    const int32_t y = b.input(t, {5, 2300});
    const int32_t m = b.node("aten::mul.Tensor", {T(x), T(y)}, t, {5, 2300});
    b.output(b.node(op, {T(m), Arg::int_list({-1}), Arg::boolean(false), Arg::integer(6)}, DType::kFloat32, {5}));
    const Graph g = b.build();
    SCOPED_TRACE(op);
    const Program p = compile_graph(g);
    ASSERT_EQ(p.steps.size(), 1u);
    EXPECT_EQ(p.steps[0].kind, Step::Kind::kFused);
    check(g);
  }
}

TEST(Interpreter, AGroupIteratesInItsOutputsMemoryOrder) {
  // y = x.t().float() keeps x's strides (as eager's cast does): iterated in
  // memory order it is one contiguous run, not a stride of 40 at each element.
  for (bool also_contiguous : {false, true}) {
    GraphBuilder b;
    const int32_t x = b.input(DType::kBFloat16, {6, 40});
    const int32_t xt = b.view(x, {40, 6}, {1, 40});
    const int32_t y = b.node("aten::_to_copy.default", {T(xt), Arg::integer(6)}, DType::kFloat32, {40, 6});
    b.graph().values[y].layout.strides = {1, 40};
    b.output(y);
    if (also_contiguous) b.output(b.node("aten::mul.Tensor", {T(y), F(2.0)}, DType::kFloat32, {40, 6}));
    const Graph g = b.build();
    const Program p = compile_graph(g);
    ASSERT_EQ(p.steps.size(), 1u);
    if (!also_contiguous) {
      EXPECT_EQ(p.steps[0].tiles.shape, (std::vector<int64_t>{240}));
    }
    check(g);
    check(g, 2, threaded_for);
  }
}

TEST(Interpreter, MaxReductionPropagatesNaNFromAnyPosition) {
  // Rows of 2300: NaN in a vector lane, in the last partial chunk's tail, in a
  // later tile; a row of -inf; a row of ordinary values with its maximum last.
  constexpr int64_t kRows = 5, kInner = 2300;
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {kRows, kInner});
  const int32_t m = b.node("aten::amax.default", {T(x), Arg::int_list({1}), Arg::boolean(false)}, DType::kFloat32, {kRows});
  b.output(m);
  const Program p = compile_graph(b.build());
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> in(kRows * kInner);
  for (int64_t i = 0; i < kRows * kInner; ++i) in[i] = static_cast<float>((i * 7919) % 1000) / 10.0f - 50.0f;
  in[0 * kInner + 17] = nan;
  in[1 * kInner + kInner - 1] = nan;
  in[2 * kInner + 1500] = nan;
  for (int64_t i = 0; i < kInner; ++i) in[3 * kInner + i] = -inf;
  in[4 * kInner + kInner - 1] = 1000.0f;
  float out[kRows];
  AlignedBytes arena(p.arena_bytes);
  RunBuffers buf{{in.data()}, {out}, arena.data()};
  TestExterns none;
  run_program(p, buf, none);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], -inf);
  EXPECT_EQ(out[4], 1000.0f);
}

TEST_P(EveryFloatType, ReductionsOfShortRowsShareTiles) {
  // Rows of 48 (a head's RMSNorm) reduce several to a tile, each into its own
  // result: over a transposed input, with the terms also stored, on the
  // calling thread and split over threads (a partial last tile of rows).
  const DType t = GetParam();
  for (const char* op : {"aten::sum.dim_IntList", "aten::mean.dim", "aten::amax.default"}) {
    for (int64_t r1 : {7, 97}) {
      GraphBuilder b;
      const int32_t x = b.input(t, {9, r1, 48});
      const int32_t yt = b.input(t, {r1, 9, 48});
      const int32_t y = b.view(yt, {9, r1, 48}, {48, 9 * 48, 1});
      // Positive terms: a sum without cancellation, within the float32 tolerance.
      const int32_t ex = b.node("aten::exp.default", {T(x)}, t, {9, r1, 48});
      const int32_t ey = b.node("aten::exp.default", {T(y)}, t, {9, r1, 48});
      const int32_t m = b.node("aten::mul.Tensor", {T(ex), T(ey)}, t, {9, r1, 48});
      std::vector<Arg> args = {T(m), Arg::int_list({2}), Arg::boolean(true)};
      if (std::string(op) != "aten::amax.default") args.push_back(Arg::none());
      b.output(b.node(op, args, t, {9, r1, 1}));
      b.output(m);
      SCOPED_TRACE(std::string(op) + " " + std::to_string(r1));
      check(b.build(), 4);
      check(b.build(), 5, threaded_for);
    }
  }
}

TEST(Interpreter, MaxOfShortRowsKeepsEachRowsNaN) {
  // Rows of 40 in tiles of several rows: a NaN stays in its own row's maximum.
  constexpr int64_t kRows = 6, kInner = 40;
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {kRows, kInner});
  b.output(b.node("aten::amax.default", {T(x), Arg::int_list({1}), Arg::boolean(false)}, DType::kFloat32, {kRows}));
  const Program p = compile_graph(b.build());
  std::vector<float> in(kRows * kInner);
  for (int64_t i = 0; i < kRows * kInner; ++i) in[i] = static_cast<float>(i % kInner);
  in[1 * kInner + 5] = std::numeric_limits<float>::quiet_NaN();
  in[4 * kInner + kInner - 1] = std::numeric_limits<float>::quiet_NaN();
  float out[kRows];
  AlignedBytes arena(p.arena_bytes);
  RunBuffers buf{{in.data()}, {out}, arena.data()};
  TestExterns none;
  run_program(p, buf, none);
  for (int64_t r = 0; r < kRows; ++r) {
    if (r == 1 || r == 4) {
      EXPECT_TRUE(std::isnan(out[r])) << r;
    } else {
      EXPECT_EQ(out[r], kInner - 1.f) << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, EveryFloatType,
                         ::testing::Values(DType::kFloat32, DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Interpreter, IntAndBoolLoadsStoresAndWhere) {
  GraphBuilder b;
  const int32_t i = b.input(DType::kInt64, {6, 40});
  const int32_t x = b.input(DType::kFloat32, {6, 40});
  const int32_t fi = b.node("aten::_to_copy.default", {T(i)}, DType::kFloat32, {6, 40});
  const int32_t mask = b.node("aten::gt.Tensor", {T(x), T(fi)}, DType::kBool, {6, 40});
  const int32_t w = b.node("aten::where.self", {T(mask), T(x), T(fi)}, DType::kFloat32, {6, 40});
  const int32_t back = b.node("aten::_to_copy.default", {T(w)}, DType::kInt64, {6, 40});
  b.output(mask);
  b.output(back);
  b.output(w);
  check(b.build());
}

TEST(Interpreter, CopiesBoolNotAndGeluBackward) {
  GraphBuilder b;
  const int32_t self = b.input(DType::kFloat32, {4, 50}, {1, 4});  // copy's destination layout
  const int32_t src = b.input(DType::kBFloat16, {50});
  const int32_t g = b.input(DType::kFloat32, {4, 50});
  const int32_t m = b.input(DType::kBool, {4, 50});
  const int32_t c = b.node("aten::copy.default", {T(self), T(src), Arg::boolean(false)}, DType::kFloat32, {4, 50});
  const int32_t nm = b.node("aten::bitwise_not.default", {T(m)}, DType::kBool, {4, 50});
  Arg none_str;
  none_str.kind = Arg::Kind::kString;
  none_str.s = "none";
  const int32_t gb = b.node("aten::gelu_backward.default", {T(g), T(c), none_str}, DType::kFloat32, {4, 50});
  b.output(nm);
  b.output(gb);
  const Graph graph = b.build();
  EXPECT_EQ(fuse(graph).groups.size(), 2u);  // (copy, gelu_backward) and (not): no horizontal fusion
  check(graph);
}

// The activations' backwards run as one tile op each, the formula of the
// chain of ops each replaced. They agree with the chain to within a few
// roundings of the formula's terms (`terms(x)`, the sum of their magnitudes),
// not bit for bit: in one expression the compiler may fuse a product and a sum
// into a multiply-add (it does at the AVX2 level), and the sums cancel.
using ChainBuilder = std::function<int32_t(GraphBuilder&, int32_t grad, int32_t x, int64_t n)>;

void expect_one_op_as_its_chain(const char* op, const ChainBuilder& chain_of, double (*terms)(double)) {
  std::vector<float> xs, gs;
  for (int i = -40000; i <= 40000; ++i) {
    xs.push_back(static_cast<float>(i) * 2e-4f);  // [-8, 8]
    gs.push_back(1.f + static_cast<float>(i % 7) * 0.37f);
  }
  for (float v : {0.f, -0.f, 30.f, -30.f, 100.f, -100.f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    xs.push_back(v);
    gs.push_back(0.5f);
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  GraphBuilder fused;
  const int32_t g1 = fused.input(DType::kFloat32, {n});
  const int32_t x1 = fused.input(DType::kFloat32, {n});
  std::vector<Arg> args{T(g1), T(x1)};
  if (std::string(op) == "aten::gelu_backward.default") {
    Arg none_str;
    none_str.kind = Arg::Kind::kString;
    none_str.s = "none";
    args.push_back(none_str);
  }
  fused.output(fused.node(op, args, DType::kFloat32, {n}));
  const Program fused_program = compile_graph(fused.build());
  EXPECT_EQ(fused_program.fused_nodes(), 1) << op;
  GraphBuilder chain;
  const int32_t g = chain.input(DType::kFloat32, {n});
  const int32_t x = chain.input(DType::kFloat32, {n});
  chain.output(chain_of(chain, g, x, n));
  std::vector<float> got(xs.size()), chained(xs.size());
  TestExterns none;
  RunBuffers fused_buf{{gs.data(), xs.data()}, {got.data()}, nullptr};
  run_program(fused_program, fused_buf, none);
  RunBuffers chain_buf{{gs.data(), xs.data()}, {chained.data()}, nullptr};
  run_program(compile_graph(chain.build()), chain_buf, none);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(chained[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << op << " at x " << xs[i];
      continue;
    }
    const double tol = 4 * std::numeric_limits<float>::epsilon() * std::fabs(gs[i]) * terms(xs[i]) +
                       std::numeric_limits<float>::denorm_min();
    EXPECT_LE(std::fabs(static_cast<double>(got[i]) - chained[i]), tol) << op << " at x " << xs[i] << ", grad " << gs[i];
  }
}

TEST(Interpreter, ActivationBackwardsAreOneOpWithTheirChainsFormula) {
  // grad * (0.5 * (1 + erf(x / sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi))
  expect_one_op_as_its_chain(
      "aten::gelu_backward.default",
      [](GraphBuilder& b, int32_t g, int32_t x, int64_t n) {
        auto op = [&](const char* name, std::vector<Arg> args) { return b.node(name, std::move(args), DType::kFloat32, {n}); };
        const int32_t e = op("aten::erf.default", {T(op("aten::mul.Tensor", {T(x), F(0.70710678118654752)}))});
        const int32_t cdf = op("aten::mul.Tensor", {T(op("aten::add.Tensor", {T(e), F(1.0), one()})), F(0.5)});
        const int32_t ex = op("aten::exp.default", {T(op("aten::mul.Tensor", {T(op("aten::mul.Tensor", {T(x), T(x)})), F(-0.5)}))});
        const int32_t pdf = op("aten::mul.Tensor", {T(ex), F(0.39894228040143268)});
        const int32_t d = op("aten::add.Tensor", {T(cdf), T(op("aten::mul.Tensor", {T(x), T(pdf)})), one()});
        return op("aten::mul.Tensor", {T(g), T(d)});
      },
      [](double x) {
        return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + std::fabs(x) * std::exp(-x * x / 2) / std::sqrt(2 * M_PI);
      });
  // grad * s * (1 + x * (1 - s)), s = sigmoid(x)
  expect_one_op_as_its_chain(
      "aten::silu_backward.default",
      [](GraphBuilder& b, int32_t g, int32_t x, int64_t n) {
        auto op = [&](const char* name, std::vector<Arg> args) { return b.node(name, std::move(args), DType::kFloat32, {n}); };
        const int32_t s = op("aten::sigmoid.default", {T(x)});
        const int32_t inner = op("aten::add.Tensor", {T(op("aten::mul.Tensor", {T(x), T(op("aten::rsub.Scalar", {T(s), F(1.0), one()}))})),
                                                      F(1.0), one()});
        return op("aten::mul.Tensor", {T(op("aten::mul.Tensor", {T(g), T(s)})), T(inner)});
      },
      [](double x) {
        const double s = 1 / (1 + std::exp(-x));
        return s * (1 + std::fabs(x) * (1 - s));
      });
}

TEST(Interpreter, ZeroSizeTensorsRunNothing) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {0, 16});
  const int32_t y = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {0, 16});
  const int32_t s = b.node("aten::sum.dim_IntList", {T(y), Arg::int_list({-1}), Arg::boolean(false), Arg::none()},
                           DType::kFloat32, {0});
  b.output(y);
  b.output(s);
  check(b.build());
  // Rows of zero length: sums are 0, means NaN.
  GraphBuilder c;
  const int32_t z = c.input(DType::kFloat32, {3, 0});
  c.output(c.node("aten::sum.dim_IntList", {T(z), Arg::int_list({1}), Arg::boolean(false), Arg::none()},
                  DType::kFloat32, {3}));
  c.output(c.node("aten::mean.dim", {T(z), Arg::int_list({1}), Arg::boolean(false), Arg::none()},
                  DType::kFloat32, {3}));
  check(c.build());
}

TEST(Interpreter, ScalarTensorsAndSizeOneDimensions) {
  GraphBuilder b;
  const int32_t s = b.input(DType::kFloat32, {});
  const int32_t x = b.input(DType::kFloat32, {1, 7, 1});
  const int32_t y = b.node("aten::mul.Tensor", {T(x), T(s)}, DType::kFloat32, {1, 7, 1});
  const int32_t z = b.node("aten::neg.default", {T(s)}, DType::kFloat32, {});
  b.output(y);
  b.output(z);
  check(b.build());
}

TEST_P(EveryFloatType, BroadcastScalarTensorsAndFma) {
  // An optimizer step's shape: 0-dim tensors (bias corrections) broadcast over
  // a parameter, and Dynamo's addcdiv_ as prims.fma.
  const DType t = GetParam();
  GraphBuilder b;
  const int32_t p = b.input(t, {3, 1000});
  const int32_t m = b.input(t, {3, 1000});
  const int32_t scale = b.input(t, {});
  const int32_t shift = b.input(DType::kFloat32, {});
  const int32_t q = b.node("aten::div.Tensor", {T(m), T(scale)}, t, {3, 1000});
  const int32_t r = b.node("prims::fma.default", {T(q), Arg::real(-0.001), T(p)}, t, {3, 1000});
  const int32_t u = b.node("prims::fma.default", {T(r), T(shift), T(q)}, t, {3, 1000});
  b.output(r);
  b.output(u);
  const Graph g = b.build();
  const Schedule s = fuse(g);
  ASSERT_EQ(s.groups.size(), 1u);  // one group: fma is pointwise
  check(g);
}

TEST(Interpreter, LargeGroupsSplitOverThreads) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {64, 2500});
  const int32_t r = b.input(DType::kFloat32, {64, 1});
  const int32_t y = b.node("aten::tanh.default", {T(x)}, DType::kFloat32, {64, 2500});
  const int32_t z = b.node("aten::add.Tensor", {T(y), T(r), one()}, DType::kFloat32, {64, 2500});
  const int32_t m = b.node("aten::amax.default", {T(z), Arg::int_list({1}), Arg::boolean(true)}, DType::kFloat32, {64, 1});
  b.output(z);
  b.output(m);
  check(b.build(), 3, threaded_for);
}

TEST(Interpreter, ExpHandlesItsRangeEnds) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {9});
  b.output(b.node("aten::exp.default", {T(x)}, DType::kFloat32, {9}));
  const Graph g = b.build();
  Program p = compile_graph(g);
  float in[9] = {-200.f, -87.f, -10.f, -0.5f, 0.f, 1e-3f, 10.f, 88.f, 100.f};
  float out[9];
  in[8] = 100.f;
  RunBuffers buf{{in}, {out}, nullptr};
  TestExterns none;
  run_program(p, buf, none);
  for (int i = 0; i < 9; ++i) {
    const double want = std::exp(static_cast<double>(in[i]));
    if (std::isinf(static_cast<float>(want))) EXPECT_TRUE(std::isinf(out[i]));
    else EXPECT_NEAR(out[i], want, 3e-7 * want + 1e-37) << in[i];
  }
}

// erf and tanh are polynomials of the interpreter's own (vectorized), joined
// at a threshold: within 4 ulp of the float64 functions over a dense range,
// across each join, at tiny inputs, saturated ends, infinities and NaN; the
// GELUs built on them follow.
TEST(Interpreter, ErfTanhAndGeluMatchTheFloat64Functions) {
  std::vector<float> in;
  for (int i = -200000; i <= 200000; ++i) in.push_back(static_cast<float>(i) * 3e-5f);  // [-6, 6]
  for (float v = 1e-30f; v < 20.f; v *= 1.01f) {
    in.push_back(v);
    in.push_back(-v);
  }
  for (float v : {0.f, -0.f, 0.5f, 0.55f, std::nextafter(0.5f, 0.f), std::nextafter(0.55f, 0.f), 40.f, -40.f, 1e30f})
    in.push_back(v);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  in.insert(in.end(), std::begin(specials), std::end(specials));
  const int64_t n = static_cast<int64_t>(in.size());

  Arg tanh_approximation;
  tanh_approximation.kind = Arg::Kind::kString;
  tanh_approximation.s = "tanh";
  struct Case {
    const char* op;
    std::vector<Arg> extra;
    double (*want)(double);
    bool times_x;  // a GELU: x times an inner function, whose error x scales
  };
  const Case cases[] = {
      {"aten::erf.default", {}, [](double x) { return std::erf(x); }, false},
      {"aten::tanh.default", {}, [](double x) { return std::tanh(x); }, false},
      {"aten::gelu.default", {}, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, true},
      {"aten::gelu.default", {tanh_approximation},
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }, true},
  };
  for (const Case& c : cases) {
    GraphBuilder b;
    const int32_t x = b.input(DType::kFloat32, {n});
    std::vector<Arg> args{T(x)};
    args.insert(args.end(), c.extra.begin(), c.extra.end());
    b.output(b.node(c.op, args, DType::kFloat32, {n}));
    const Graph g = b.build();
    Program p = compile_graph(g);
    std::vector<float> out(in.size());
    RunBuffers buf{{in.data()}, {out.data()}, nullptr};
    TestExterns none;
    run_program(p, buf, none);
    for (int64_t i = 0; i < n; ++i) {
      const double want = c.want(static_cast<double>(in[i]));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(out[i])) << c.op << " at " << in[i];
        continue;
      }
      const double wantf = static_cast<float>(want);
      if (std::isinf(wantf)) {
        EXPECT_EQ(out[i], wantf) << c.op << " at " << in[i];
        continue;
      }
      const float a = std::fabs(static_cast<float>(wantf));
      const double ulp = std::max(static_cast<double>(std::nextafter(a, inf) - a),
                                  static_cast<double>(std::numeric_limits<float>::denorm_min()));
      // A GELU's error is x times its inner function's (4 ulp of a value up to 1).
      const double allowed = 4 * ulp + (c.times_x ? 4 * 6e-8 * std::fabs(in[i]) : 0);
      ASSERT_LE(std::fabs(out[i] - want), allowed) << c.op << " at " << in[i] << ": " << out[i] << " vs " << want;
    }
  }
}

// Random pointwise graphs over a few shapes that broadcast into each other.
TEST(Interpreter, RandomPointwiseGraphsMatchTheReference) {
  std::mt19937 rng(11);
  const char* unary[] = {"aten::exp.default", "aten::neg.default", "aten::relu.default", "aten::sigmoid.default",
                         "aten::tanh.default"};
  const char* binary[] = {"aten::add.Tensor", "aten::sub.Tensor", "aten::mul.Tensor"};
  for (int trial = 0; trial < 40; ++trial) {
    GraphBuilder b;
    const std::vector<int64_t> full = {3, 1 + static_cast<int64_t>(rng() % 5), 2 + static_cast<int64_t>(rng() % 300)};
    std::vector<int32_t> pool = {b.input(DType::kFloat32, full), b.input(DType::kFloat32, {full[2]}),
                                 b.input(DType::kBFloat16, {full[1], 1})};
    const int n_nodes = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n_nodes; ++k) {
      const int32_t a = pool[rng() % pool.size()];
      if (rng() % 2) {
        pool.push_back(b.node(unary[rng() % 5], {T(a)}, b.graph().values[a].layout.dtype, b.graph().values[a].layout.sizes));
      } else {
        const int32_t c = pool[rng() % pool.size()];
        const DType t = b.graph().values[a].layout.dtype == DType::kBFloat16 && b.graph().values[c].layout.dtype == DType::kBFloat16
                            ? DType::kBFloat16 : DType::kFloat32;
        std::vector<int64_t> shape = full;
        const auto& sa = b.graph().values[a].layout.sizes;
        const auto& sc = b.graph().values[c].layout.sizes;
        if (sa == sc) shape = sa;
        std::vector<Arg> args = {T(a), T(c)};
        const std::string op = binary[rng() % 3];
        if (op != "aten::mul.Tensor") args.push_back(Arg::integer(1));
        pool.push_back(b.node(op, args, t, shape));
      }
    }
    b.output(pool.back());
    b.output(pool[3 + rng() % (pool.size() - 3)]);
    SCOPED_TRACE("trial " + std::to_string(trial));
    check(b.build(), trial);
  }
}

TEST(TileProgram, ValidateRefusesUnsetSlots) {
  TileProgram p;
  p.shape = {4};
  p.num_slots = 2;
  TileInstr neg;
  neg.op = TileOp::kNeg;
  neg.a = 0;
  neg.dst = 1;
  p.instrs.push_back(neg);
  EXPECT_THROW(p.validate(), CompileError);
}

TEST(Interpreter, AFullTensorInAGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kBFloat16, {4, 300});
  const int32_t z = b.node("aten::full.default", {Arg::int_list({4, 300}), F(-1.25), Arg::integer(15), Arg::none(),
                                                  Arg::none(), Arg::boolean(false)},
                           DType::kBFloat16, {4, 300});
  b.output(z);
  b.output(b.node("aten::mul.Tensor", {T(x), T(z)}, DType::kBFloat16, {4, 300}));
  check(b.build());
}

TEST(Interpreter, ARoundingThatOnlyFeedsAStoreOfItsTypeIsLeftToTheStore) {
  // bfloat16 (x * y) + z, both results outputs: the product is rounded for the
  // add that reads it, the sum only for its store.
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    GraphBuilder b;
    const int32_t x = b.input(t, {3, 2500});
    const int32_t y = b.input(t, {3, 2500});
    const int32_t z = b.input(t, {3, 2500});
    const int32_t m = b.node("aten::mul.Tensor", {T(x), T(y)}, t, {3, 2500});
    const int32_t s = b.node("aten::add.Tensor", {T(m), T(z), one()}, t, {3, 2500});
    b.output(m);
    b.output(s);
    const CompiledRun r = compile_and_run(b.build(), nullptr, 5);
    int roundings = 0;
    for (const Step& step : r.program.steps) {
      for (const TileInstr& in : step.tiles.instrs) roundings += in.op == TileOp::kRoundTo;
    }
    EXPECT_EQ(roundings, 1) << dtype_name(t);
    // Per-op rounding as eager: each float32 result rounded to t, bit for bit.
    const std::vector<const void*> in = input_pointers(r);
    const std::vector<double> got_m = r.output(0), got_s = r.output(1);
    for (size_t e = 0; e < got_s.size(); ++e) {
      auto at = [&](int k) { return static_cast<float>(read_element(t, static_cast<const char*>(in[k]) + e * dtype_size(t))); };
      const float want_m = static_cast<float>(round_to(t, static_cast<double>(at(0) * at(1))));
      const float want_s = static_cast<float>(round_to(t, static_cast<double>(want_m + at(2))));
      ASSERT_EQ(got_m[e], want_m) << dtype_name(t) << " element " << e;
      ASSERT_EQ(got_s[e], want_s) << dtype_name(t) << " element " << e;
    }
  }
}

TEST(Interpreter, AChoiceAmongValuesOfItsTypeIsNotRoundedAgain) {
  // where(c, x * y, x + y) picks values already rounded to t; only the
  // product and the sum are rounded (the final product only for its store).
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    GraphBuilder b;
    const int32_t c = b.input(DType::kBool, {3, 2500});
    const int32_t x = b.input(t, {3, 2500});
    const int32_t y = b.input(t, {3, 2500});
    const int32_t m = b.node("aten::mul.Tensor", {T(x), T(y)}, t, {3, 2500});
    const int32_t s = b.node("aten::add.Tensor", {T(x), T(y), one()}, t, {3, 2500});
    const int32_t w = b.node("aten::where.self", {T(c), T(m), T(s)}, t, {3, 2500});
    b.output(b.node("aten::mul.Tensor", {T(w), T(w)}, t, {3, 2500}));
    const Graph g = b.build();
    const CompiledRun r = compile_and_run(g, nullptr, 7);
    int roundings = 0;
    for (const Step& step : r.program.steps) {
      for (const TileInstr& in : step.tiles.instrs) roundings += in.op == TileOp::kRoundTo;
    }
    EXPECT_EQ(roundings, 2) << dtype_name(t);
    check(g, 7);
  }
}
