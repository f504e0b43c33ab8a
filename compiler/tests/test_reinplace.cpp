// Re-inplacing on hand-built graphs: a KV-cache style update of an input
// (functional index_put, then a copy back into the input) runs in place, and
// the cases where it must not.
#include <gtest/gtest.h>

#include "graph_builder.hpp"
#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/reinplace.hpp"

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
}

TEST(Reinplace, AReadOfTheOldInputInBetweenKeepsTheCopy) {
  Graph g = cache_update(true);
  EXPECT_EQ(reinplace(g), 0);
}

TEST(Reinplace, AResultThatIsAnOutputKeepsTheCopy) {
  Graph g = cache_update(false, true);
  EXPECT_EQ(reinplace(g), 0);
}
