// Re-inplacing on hand-built graphs: a KV-cache style update of an input
// (functional index_put, then a copy back into the input) runs in place, and
// the cases where it must not.
#include <gtest/gtest.h>

#include "graph_builder.hpp"
#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/reinplace.hpp"
#include "run_helpers.hpp"

#include <algorithm>
#include <string>
#include <vector>

using namespace nc_test;

namespace {

// cache [2, 8]; cache[:, pos] = v; out = cache_new * 2 (+ optionally a read of the old cache in between).
Graph cache_update(bool read_between, bool output_the_result = false) {
  GraphBuilder b;
  const int32_t cache = b.input(DType::kFloat32, {2, 8});
  const int32_t pos = b.input(DType::kInt64, {1});
  const int32_t v = b.input(DType::kFloat32, {2, 1});
  Arg indices;
  indices.kind = Arg::Kind::kTensorList;
  indices.ints = {-1, pos};
  const int32_t updated = b.node("aten::index_put.default", {T(cache), indices, T(v), Arg::boolean(false)},
                                 DType::kFloat32, {2, 8});
  const int32_t doubled = b.node("aten::mul.Tensor", {T(updated), F(2.0)}, DType::kFloat32, {2, 8});
  if (read_between) b.output(b.node("aten::exp.default", {T(cache)}, DType::kFloat32, {2, 8}));
  b.copy_into(cache, updated);
  b.output(doubled);
  if (output_the_result) b.output(updated);
  return b.build();
}

}  // namespace

TEST(Reinplace, ACacheUpdateRunsInPlaceOnTheInput) {
  Graph g = cache_update(false);
  EXPECT_EQ(reinplace(g), 1);
  g.validate();
  ASSERT_EQ(g.nodes.size(), 2u);  // no copy back
  EXPECT_EQ(g.nodes[0].op, "aten::index_put_.default");
  EXPECT_TRUE(g.nodes[0].outputs.empty());
  EXPECT_TRUE(writes_first_argument(g.nodes[0]));
  const int32_t updated = static_cast<int32_t>(g.nodes[1].args[0].i);
  EXPECT_EQ(g.root(updated), g.inputs[0]);  // the result views the cache
  CompileReport rep;
  const Program p = compile_graph(cache_update(false), &rep);
  EXPECT_EQ(rep.reinplaced, 1);
  EXPECT_EQ(p.arena_bytes, 0);  // no copy of the cache
  // ... and the in-place write is the native index copy, not an extern call.
  EXPECT_EQ(rep.extern_calls, 0);
  EXPECT_EQ(rep.native_kernels, 1);
}

// The native index copy writes whole slices at the given positions (negative
// ones wrap) from a non-contiguous source, leaves every other element alone,
// and refuses an index out of range naming it.
TEST(Reinplace, TheNativeIndexCopyWritesTheSlicesOfItsIndex) {
  // cache [2, 3, 5, 4] (dim 2 indexed); source [2, 3, 2, 4] as a permuted view of [2, 2, 3, 4].
  GraphBuilder b;
  const int32_t cache = b.input(DType::kFloat32, {2, 3, 5, 4});
  const int32_t pos = b.input(DType::kInt64, {2});
  const int32_t raw = b.input(DType::kFloat32, {2, 2, 3, 4});
  const int32_t v = b.view(raw, {2, 3, 2, 4}, {24, 4, 12, 1}, 0);
  Arg indices;
  indices.kind = Arg::Kind::kTensorList;
  indices.ints = {-1, -1, pos};
  const int32_t updated = b.node("aten::index_put.default", {T(cache), indices, T(v), Arg::boolean(false)},
                                 DType::kFloat32, {2, 3, 5, 4});
  b.copy_into(cache, updated);
  b.output(b.node("aten::mul.Tensor", {T(updated), F(1.0)}, DType::kFloat32, {2, 3, 5, 4}));
  CompileReport rep;
  const Program p = compile_graph(b.build(), &rep);
  ASSERT_EQ(rep.native_kernels, 1);
  std::vector<float> c(120), src(48), out(120);
  for (size_t i = 0; i < c.size(); ++i) c[i] = -static_cast<float>(i);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 1000.f + static_cast<float>(i);
  for (int64_t bad : {int64_t{5}, int64_t{-6}}) {
    int64_t positions[2] = {1, bad};
    RunBuffers buf{{c.data(), positions, src.data()}, {out.data()}, nullptr};
    TestExterns none;
    try {
      run_program(p, buf, none);
      ADD_FAILURE() << "index " << bad << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("index " + std::to_string(bad) + " is out of bounds for dimension 2 with size 5"),
                std::string::npos) << e.what();
    }
  }
  int64_t positions[2] = {3, -5};  // -5 is row 0
  std::vector<float> want = c;
  for (int i0 = 0; i0 < 2; ++i0)
    for (int i1 = 0; i1 < 3; ++i1)
      for (int j = 0; j < 2; ++j)
        for (int i3 = 0; i3 < 4; ++i3) {
          const int row = j == 0 ? 3 : 0;
          want[((i0 * 3 + i1) * 5 + row) * 4 + i3] = src[i0 * 24 + j * 12 + i1 * 4 + i3];
        }
  RunBuffers buf{{c.data(), positions, src.data()}, {out.data()}, nullptr};
  TestExterns none;
  run_program(p, buf, none);
  EXPECT_EQ(c, want);  // written in place
  EXPECT_EQ(out, want);
}

// index_put_ with accumulate, several index tensors or a broadcast source stays an extern call.
TEST(Reinplace, IndexPutsTheNativeCopyDoesNotTakeStayExtern) {
  for (int variant = 0; variant < 3; ++variant) {
    GraphBuilder b;
    const int32_t cache = b.input(DType::kFloat32, {2, 8});
    const int32_t pos = b.input(DType::kInt64, {1});
    const int32_t v = b.input(DType::kFloat32, variant == 2 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{2, 1});
    Arg indices;
    indices.kind = Arg::Kind::kTensorList;
    indices.ints = variant == 1 ? std::vector<int64_t>{pos, pos} : std::vector<int64_t>{-1, pos};
    const int32_t updated = b.node("aten::index_put.default", {T(cache), indices, T(v), Arg::boolean(variant == 0)},
                                   DType::kFloat32, {2, 8});
    b.copy_into(cache, updated);
    b.output(b.node("aten::mul.Tensor", {T(updated), F(2.0)}, DType::kFloat32, {2, 8}));
    CompileReport rep;
    compile_graph(b.build(), &rep);
    EXPECT_EQ(rep.native_kernels, 0) << "variant " << variant;
    EXPECT_EQ(rep.extern_calls, 1) << "variant " << variant;
  }
}

TEST(Reinplace, AReadOfTheOldInputInBetweenKeepsTheCopy) {
  Graph g = cache_update(true);
  EXPECT_EQ(reinplace(g), 0);
}

TEST(Reinplace, AResultThatIsAnOutputKeepsTheCopy) {
  Graph g = cache_update(false, true);
  EXPECT_EQ(reinplace(g), 0);
}

namespace {

// z = x * 2 and z2 = x * 5 (one group); s = slice_scatter(z, y, 1, 1, 5, 2)
// (or select_scatter(z, y[:, 0], 1, 3)); outputs s + 1 and z2 * 3 (which would
// join z's group if the scatter's write did not seal it); `read_z_later` also
// outputs z * 7 after the scatter.
Graph scatter_graph(bool select, bool read_z_later, bool self_is_input = false) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 6});
  const int32_t y = b.input(DType::kFloat32, select ? std::vector<int64_t>{4} : std::vector<int64_t>{4, 2});
  const int32_t z = self_is_input ? x : b.node("aten::mul.Tensor", {T(x), F(2.0)}, DType::kFloat32, {4, 6});
  const int32_t z2 = b.node("aten::mul.Tensor", {T(x), F(5.0)}, DType::kFloat32, {4, 6});
  const int32_t s = select ? b.node("aten::select_scatter.default", {T(z), T(y), Arg::integer(1), Arg::integer(3)},
                                    DType::kFloat32, {4, 6})
                           : b.node("aten::slice_scatter.default",
                                    {T(z), T(y), Arg::integer(1), Arg::integer(1), Arg::integer(5), Arg::integer(2)},
                                    DType::kFloat32, {4, 6});
  b.output(b.node("aten::add.Tensor", {T(s), F(1.0), Arg::integer(1)}, DType::kFloat32, {4, 6}));
  b.output(b.node("aten::mul.Tensor", {T(z2), F(3.0)}, DType::kFloat32, {4, 6}));
  if (read_z_later) b.output(b.node("aten::mul.Tensor", {T(z), F(7.0)}, DType::kFloat32, {4, 6}));
  return b.build();
}

void expect_scatter_results(const CompiledRun& r, bool select, bool self_is_input) {
  const auto* x = static_cast<const float*>(r.buffers.inputs[0]);
  const auto* y = static_cast<const float*>(r.buffers.inputs[1]);
  const std::vector<double> s1 = r.output(0), z2 = r.output(1);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 6; ++j) {
      double want = (self_is_input ? 1.0 : 2.0) * x[i * 6 + j];
      if (select && j == 3) want = y[i];
      if (!select && (j == 1 || j == 3)) want = y[i * 2 + (j - 1) / 2];
      EXPECT_FLOAT_EQ(s1[i * 6 + j], static_cast<float>(want + 1.0)) << i << "," << j;
      EXPECT_FLOAT_EQ(z2[i * 6 + j], static_cast<float>(x[i * 6 + j] * 5.0f * 3.0f)) << i << "," << j;
    }
  }
}

}  // namespace

TEST(Reinplace, AScatterIntoAnIntermediateNothingReadsAfterWritesItsSliceInPlace) {
  for (bool select : {false, true}) {
    SCOPED_TRACE(select ? "select_scatter" : "slice_scatter");
    Graph g = scatter_graph(select, false);
    EXPECT_EQ(reinplace(g), 1);
    g.validate();
    const auto copy = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == kCopyInto; });
    ASSERT_NE(copy, g.nodes.end());
    EXPECT_EQ(copy->args.size(), 3u);  // copy_(self, src, non_blocking): an extern call checks the schema
    CompileReport rep;
    const Graph original = scatter_graph(select, false);
    const Program p = compile_graph(original, &rep);
    EXPECT_EQ(rep.reinplaced, 1);
    EXPECT_EQ(rep.extern_calls, 0) << p.describe();  // the copy into the slice is a fused group
    expect_scatter_results(compile_and_run(original), select, false);
    expect_scatter_results(compile_and_run(original, nullptr, 3, threaded_for), select, false);
  }
}

TEST(Reinplace, AScatterWhoseSelfIsReadAfterOrAnInputKeepsItsCopy) {
  Graph later = scatter_graph(false, true);
  EXPECT_EQ(reinplace(later), 0);
  Graph input = scatter_graph(false, false, true);
  EXPECT_EQ(reinplace(input), 0);
  CompileReport rep;
  compile_graph(scatter_graph(false, true), &rep);
  EXPECT_EQ(rep.reinplaced, 0);
  EXPECT_EQ(rep.extern_calls, 1);  // the scatter stays: ATen's kernel copies self
}
