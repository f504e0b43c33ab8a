// IR: layouts, views as metadata over a base buffer, graph validation.
#include <gtest/gtest.h>

#include "graph_builder.hpp"

using namespace nc_test;

TEST(Layout, ExtentCountsTheLastTouchedElement) {
  Layout l{DType::kFloat32, {2, 3}, {3, 1}, 0};
  EXPECT_EQ(l.numel(), 6);
  EXPECT_EQ(l.extent(), 6);
  EXPECT_TRUE(l.is_contiguous());
  Layout t{DType::kFloat32, {3, 2}, {1, 3}, 2};  // a transposed view at offset 2
  EXPECT_EQ(t.extent(), 2 + 2 * 1 + 1 * 3 + 1);
  EXPECT_FALSE(t.is_contiguous());
  Layout empty{DType::kFloat32, {4, 0}, {1, 1}, 0};
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.extent(), 0);
  Layout scalar{DType::kFloat32, {}, {}, 0};
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.extent(), 1);
  Layout expanded{DType::kFloat32, {4, 3}, {0, 1}, 0};
  EXPECT_EQ(expanded.extent(), 3);
  EXPECT_EQ(contiguous_strides({2, 0, 3}), (std::vector<int64_t>{3, 3, 1}));
}

TEST(Graph, ViewsShareTheirBaseBuffer) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 4});
  const int32_t row = b.view(x, {4}, {1}, 8);
  const int32_t y = b.node("aten::neg.default", {T(row)}, DType::kFloat32, {4});
  const int32_t yv = b.view(y, {2, 2}, {2, 1});
  b.output(yv);
  const Graph g = b.build();
  EXPECT_EQ(g.root(row), x);
  EXPECT_EQ(g.root(yv), y);
  EXPECT_EQ(g.root(y), y);
  EXPECT_TRUE(g.value(row).is_view());
}

TEST(Graph, ValidateRefusesBadGraphs) {
  {
    GraphBuilder b;
    const int32_t x = b.input(DType::kFloat32, {4});
    const int32_t v = b.view(x, {2}, {1});
    b.graph().nodes.push_back({"aten::neg.default", {T(x)}, {v}});
    EXPECT_THROW(b.build(), CompileError);  // a node defining a view
  }
  {
    GraphBuilder b;
    const int32_t x = b.input(DType::kFloat32, {4});
    b.graph().nodes.push_back({"aten::neg.default", {T(x)}, {x}});
    EXPECT_THROW(b.build(), CompileError);  // defined twice
  }
  {
    GraphBuilder b;
    b.input(DType::kFloat32, {4});
    b.output(7);
    EXPECT_THROW(b.build(), CompileError);  // unknown value
  }
  {
    GraphBuilder b;
    b.input(DType::kFloat32, {4}, {-1});
    EXPECT_THROW(b.build(), CompileError);  // negative stride
  }
}
