// Accumulators that start at zero (simplify.hpp): what AOTAutograd writes for
// `acc = zeros(); acc[:n].addmm_(a, b)` runs as the product alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "graph_builder.hpp"
#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/simplify.hpp"
#include "run_helpers.hpp"

using namespace nc_test;

namespace {

constexpr int64_t kF32 = 6;  // torch's ScalarType number for float32

struct AccumulatorGraph {
  double alpha = 1.0, beta = 1.0;
  bool dtype_form = false;     // addmm.dtype(zeros, a, b, float32, beta, alpha)
  bool fill_read_too = false;  // the zero fill is also a graph output
  bool whole = true;           // the scatter covers the whole base
};

// zeros [6, 4]; y = addmm(zeros[0:6], a [6, 8], b [8, 4]); s = slice_scatter(zeros, y, 0, 0, 6)
// (or, not whole, a [4, 4] product scattered into rows 1..5); out = s + e, and s viewed as [24].
Graph accumulator_graph(const AccumulatorGraph& o) {
  GraphBuilder b;
  const DType f = DType::kFloat32;
  const int64_t rows = o.whole ? 6 : 4;
  const int32_t a = b.input(f, {rows, 8});
  const int32_t m = b.input(f, {8, 4});
  const int32_t e = b.input(f, {6, 4});
  const int32_t zeros = b.node("aten::full.default", {Arg::int_list({6, 4}), Arg::integer(0), Arg::integer(kF32),
                                                      Arg::none(), Arg::none(), Arg::boolean(false)}, f, {6, 4});
  const int32_t acc = b.view(zeros, {rows, 4}, {4, 1}, o.whole ? 0 : 4);
  std::vector<Arg> args{T(acc), T(a), T(m)};
  if (o.dtype_form) args.push_back(Arg::integer(kF32));
  args.push_back(F(o.beta));
  args.push_back(F(o.alpha));
  const int32_t y = b.node(o.dtype_form ? "aten::addmm.dtype" : "aten::addmm.default", args, f, {rows, 4});
  const int32_t s = b.node("aten::slice_scatter.default",
                           {T(zeros), T(y), Arg::integer(0), Arg::integer(o.whole ? 0 : 1),
                            Arg::integer(o.whole ? INT64_MAX : 5), Arg::integer(1)}, f, {6, 4});
  b.output(b.node("aten::add.Tensor", {T(s), T(e), Arg::integer(1)}, f, {6, 4}));
  b.output(b.view(s, {24}, {1}));
  if (o.fill_read_too) b.output(zeros);
  return b.build();
}

int count_steps(const Program& p, const std::string& op) {
  int n = 0;
  for (const Step& s : p.steps) n += s.kind == Step::Kind::kExtern && s.node.op == op;
  return n;
}

void reference_mm(const Program& p, const RunBuffers& buf, const Step& s) {
  const auto* a = static_cast<const float*>(value_data(p, buf, static_cast<int32_t>(s.node.args[0].i)));
  const auto* m = static_cast<const float*>(value_data(p, buf, static_cast<int32_t>(s.node.args[1].i)));
  auto* out = static_cast<float*>(value_data(p, buf, s.node.outputs[0]));
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < 8; ++k) sum += double(a[i * 8 + k]) * m[k * 4 + j];
      out[i * 4 + j] = static_cast<float>(sum);
    }
  }
}

}  // namespace

TEST(Simplify, AProductIntoZerosIsTheProductAloneAndTheScatterItsSource) {
  for (bool dtype_form : {false, true}) {
    SCOPED_TRACE(dtype_form ? "addmm.dtype" : "addmm");
    AccumulatorGraph o;
    o.dtype_form = dtype_form;
    o.beta = 0.5;  // beta * 0 is 0 whatever beta is (if finite)
    Graph g = accumulator_graph(o);
    const SimplifyReport rep = simplify_functionalized_updates(g);
    EXPECT_EQ(rep.zero_accumulators, 1);
    EXPECT_EQ(rep.whole_scatters, 1);
    EXPECT_EQ(rep.dead_nodes, 1);
    const Program p = compile_graph(accumulator_graph(o));
    EXPECT_EQ(count_steps(p, dtype_form ? "aten::mm.dtype" : "aten::mm.default"), 1) << p.describe();
    EXPECT_EQ(count_steps(p, "aten::slice_scatter.default"), 0) << p.describe();
    EXPECT_EQ(p.steps.size(), 2u) << p.describe();  // the product and the add: no fill, no copy
  }
}

TEST(Simplify, TheSimplifiedProgramComputesWhatTheGraphDoes) {
  TestExterns externs;
  externs.ops["aten::mm.default"] = reference_mm;
  const CompiledRun r = compile_and_run(accumulator_graph({}), &externs, 3);
  EXPECT_EQ(externs.calls, 1);
  const auto* a = static_cast<const float*>(r.buffers.inputs[0]);
  const auto* m = static_cast<const float*>(r.buffers.inputs[1]);
  const auto* e = static_cast<const float*>(r.buffers.inputs[2]);
  const std::vector<double> sum = r.output(0), scattered = r.output(1);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) {
      double want = 0;
      for (int k = 0; k < 8; ++k) want += double(a[i * 8 + k]) * m[k * 4 + j];
      EXPECT_NEAR(scattered[i * 4 + j], want, 1e-5 * (1 + std::fabs(want)));  // the view of the scatter's result
      EXPECT_NEAR(sum[i * 4 + j], want + e[i * 4 + j], 1e-5 * (1 + std::fabs(want)));
    }
  }
}

TEST(Simplify, OtherAccumulatorsAndPartialScattersStay) {
  struct Case {
    const char* name;
    AccumulatorGraph o;
    int zero_accumulators, whole_scatters, dead_nodes;
  };
  AccumulatorGraph alpha, infinite_beta, fill_output, partial;
  alpha.alpha = 2.0;                 // the product scaled: still an addmm (reading zeros)
  infinite_beta.beta = INFINITY;     // inf * 0 is NaN: the accumulator is read
  fill_output.fill_read_too = true;  // the zeros are an output: the fill stays
  partial.whole = false;             // rows 1..5 of the zeros: the scatter stays, so does the fill
  for (const Case& c : {Case{"alpha", alpha, 0, 1, 0}, Case{"infinite beta", infinite_beta, 0, 1, 0},
                        Case{"fill output", fill_output, 1, 1, 0}, Case{"partial", partial, 1, 0, 0}}) {
    SCOPED_TRACE(c.name);
    Graph g = accumulator_graph(c.o);
    const SimplifyReport rep = simplify_functionalized_updates(g);
    EXPECT_EQ(rep.zero_accumulators, c.zero_accumulators);
    EXPECT_EQ(rep.whole_scatters, c.whole_scatters);
    EXPECT_EQ(rep.dead_nodes, c.dead_nodes);
    g.validate();
  }
}

namespace {

// buf = empty [6, 6]; p = mm(a [6, 8], m [8, 4]); s = slice_scatter(buf, p, 1, 1, 5);
// y = s[:, 1:5] * 2; c = copy(s[:, 1:5], y); s2 = slice_scatter(s, c, 1, 1, 5);
// z = s2[:, 1:5] + s2[:, 1:5]; w = s2[:, 1:5].t() * 3 (TRL's `torch.mm(..., out=tile)` and `tile.copy_(...)`
// on a slice of a larger buffer). With `written_src`, p is an input instead,
// copied into after the scatter.
Graph scattered_tile_graph(bool written_src) {
  GraphBuilder b;
  const DType f = DType::kFloat32;
  const int32_t a = b.input(f, {6, 8});
  const int32_t m = b.input(f, {8, 4});
  const int32_t x = b.input(f, {6, 4});
  const int32_t buf = b.node("aten::empty.memory_format", {Arg::int_list({6, 6}), Arg::integer(kF32), Arg::none(),
                                                           Arg::none(), Arg::boolean(false), Arg::none()}, f, {6, 6});
  const int32_t p = written_src ? x : b.node("aten::mm.default", {T(a), T(m)}, f, {6, 4});
  auto scatter = [&](int32_t base, int32_t src) {
    return b.node("aten::slice_scatter.default", {T(base), T(src), Arg::integer(1), Arg::integer(1), Arg::integer(5),
                                                  Arg::integer(1)}, f, {6, 6});
  };
  const int32_t s = scatter(buf, p);
  if (written_src) b.copy_into(x, b.node("aten::neg.default", {T(x)}, f, {6, 4}));
  const int32_t y = b.node("aten::mul.Tensor", {T(b.view(s, {6, 4}, {6, 1}, 1)), F(2.0)}, f, {6, 4});
  b.output(y);
  const int32_t c = b.node("aten::copy.default", {T(b.view(s, {6, 4}, {6, 1}, 1)), T(y), Arg::boolean(false)}, f,
                           {6, 4});
  const int32_t s2 = scatter(s, c);
  const int32_t v2 = b.view(s2, {6, 4}, {6, 1}, 1);
  b.output(b.node("aten::add.Tensor", {T(v2), T(v2), Arg::integer(1)}, f, {6, 4}));
  const int32_t t2 = b.view(s2, {4, 6}, {1, 6}, 1);  // the region transposed: a view of c
  b.output(b.node("aten::mul.Tensor", {T(t2), F(3.0)}, f, {4, 6}));
  return b.build();
}

}  // namespace

TEST(Simplify, SlicesOfAScattersRegionReadItsSource) {
  Graph g = scattered_tile_graph(false);
  const SimplifyReport rep = simplify_functionalized_updates(g);
  EXPECT_EQ(rep.scattered_views, 4);  // s's two views of the region, and s2's two
  EXPECT_EQ(rep.dead_nodes, 3);        // s2, s and the empty buffer
  g.validate();

  TestExterns externs;
  externs.ops["aten::mm.default"] = reference_mm;
  const CompiledRun r = compile_and_run(scattered_tile_graph(false), &externs, 5);
  EXPECT_EQ(count_steps(r.program, "aten::slice_scatter.default"), 0) << r.program.describe();
  EXPECT_EQ(count_steps(r.program, "aten::empty.memory_format"), 0) << r.program.describe();
  const auto* a = static_cast<const float*>(r.buffers.inputs[0]);
  const auto* m = static_cast<const float*>(r.buffers.inputs[1]);
  const std::vector<double> y = r.output(0), z = r.output(1), w = r.output(2);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) {
      double want = 0;
      for (int k = 0; k < 8; ++k) want += double(a[i * 8 + k]) * m[k * 4 + j];
      EXPECT_NEAR(y[i * 4 + j], 2 * want, 1e-5 * (1 + std::fabs(want)));
      EXPECT_NEAR(z[i * 4 + j], 4 * want, 1e-5 * (1 + std::fabs(want)));
      EXPECT_NEAR(w[j * 6 + i], 6 * want, 1e-5 * (1 + std::fabs(want)));
    }
  }
}

TEST(Simplify, ASliceOfAScatteredInputWrittenLaterStays) {
  // The scatter copied x's values before the copy into x: its slices must
  // not read x after it. Only s2's (whose source is c) read their source.
  Graph g = scattered_tile_graph(true);
  const SimplifyReport rep = simplify_functionalized_updates(g);
  EXPECT_EQ(rep.scattered_views, 2);  // s2's two views
  EXPECT_EQ(rep.dead_nodes, 1);       // s2
  g.validate();
  int scatters = 0;
  for (const Node& n : g.nodes) scatters += n.op == "aten::slice_scatter.default";
  EXPECT_EQ(scatters, 1);
  for (const Node& n : g.nodes) {
    if (n.op != "aten::mul.Tensor") continue;
    const int32_t read = static_cast<int32_t>(n.args[0].i);
    EXPECT_NE(g.root(read), g.inputs[2]) << "y reads x after the copy into it";
  }
}

TEST(Simplify, ViewsReachingPastTheScatteredRegionStay) {
  // Columns 0..4 of s (column 0 is buf's, not p's) and its diagonal (a step
  // across both dimensions) still view the scatter's result.
  GraphBuilder b;
  const DType f = DType::kFloat32;
  const int32_t p = b.input(f, {6, 4});
  const int32_t buf = b.node("aten::full.default", {Arg::int_list({6, 6}), F(1.0), Arg::integer(kF32), Arg::none(),
                                                    Arg::none(), Arg::boolean(false)}, f, {6, 6});
  const int32_t s = b.node("aten::slice_scatter.default", {T(buf), T(p), Arg::integer(1), Arg::integer(1),
                                                           Arg::integer(5), Arg::integer(1)}, f, {6, 6});
  b.output(b.node("aten::neg.default", {T(b.view(s, {6, 5}, {6, 1}, 0))}, f, {6, 5}));
  b.output(b.node("aten::neg.default", {T(b.view(s, {4}, {7}, 1))}, f, {4}));
  Graph g = b.build();
  const SimplifyReport rep = simplify_functionalized_updates(g);
  EXPECT_EQ(rep.scattered_views, 0);
  EXPECT_EQ(rep.dead_nodes, 0);
  g.validate();
}
