// Fusion decisions: what joins a group, what stays a node of its own, what
// is materialized.
#include <gtest/gtest.h>

#include <utility>

#include "graph_builder.hpp"
#include "neuroncompiler/fusion.hpp"

using namespace nc_test;

namespace {

int count(const Schedule& s, ScheduledStep::Kind kind) {
  int n = 0;
  for (const auto& st : s.steps) n += st.kind == kind;
  return n;
}

}  // namespace

TEST(Fusion, APointwiseChainWithBroadcastAndCastsIsOneGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kBFloat16, {8, 16});
  const int32_t bias = b.input(DType::kFloat32, {16});
  const int32_t xf = b.node("aten::_to_copy.default", {T(x), Arg::integer(6)}, DType::kFloat32, {8, 16});
  const int32_t y = b.node("aten::add.Tensor", {T(xf), T(bias), Arg::integer(1)}, DType::kFloat32, {8, 16});
  const int32_t z = b.node("aten::relu.default", {T(y)}, DType::kFloat32, {8, 16});
  const int32_t w = b.node("aten::_to_copy.default", {T(z), Arg::integer(15)}, DType::kBFloat16, {8, 16});
  b.output(w);
  const Graph g = b.build();
  const Schedule s = fuse(g);
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].nodes.size(), 4u);
  EXPECT_EQ(count(s, ScheduledStep::Kind::kNode), 0);
  EXPECT_FALSE(s.materialized[xf]);
  EXPECT_FALSE(s.materialized[y]);
  EXPECT_TRUE(s.materialized[w]);
}

TEST(Fusion, AMatmulSplitsTheChainAndReadsAMaterializedValue) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 4});
  const int32_t a = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 4});
  const int32_t m = b.node("aten::mm.default", {T(a), T(x)}, DType::kFloat32, {4, 4});
  const int32_t c = b.node("aten::neg.default", {T(m)}, DType::kFloat32, {4, 4});
  const int32_t d = b.node("aten::mul.Tensor", {T(c), T(a)}, DType::kFloat32, {4, 4});
  b.output(d);
  const Schedule s = fuse(b.build());
  EXPECT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(count(s, ScheduledStep::Kind::kNode), 1);
  EXPECT_TRUE(s.materialized[a]);   // read by the matmul
  EXPECT_TRUE(s.materialized[m]);
  EXPECT_FALSE(s.materialized[c]);
  // Order: group(exp), mm, group(neg, mul).
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].kind, ScheduledStep::Kind::kFused);
  EXPECT_EQ(s.steps[1].kind, ScheduledStep::Kind::kNode);
  EXPECT_EQ(s.steps[2].kind, ScheduledStep::Kind::kFused);
}

TEST(Fusion, ATrailingLastDimReductionClosesTheGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 32});
  const int32_t e = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 32});
  const int32_t s1 = b.node("aten::sum.dim_IntList", {T(e), Arg::int_list({-1}), Arg::boolean(true), Arg::none()},
                            DType::kFloat32, {4, 1});
  const int32_t d = b.node("aten::div.Tensor", {T(e), T(s1)}, DType::kFloat32, {4, 32});
  b.output(d);
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_TRUE(s.groups[0].reduces);
  EXPECT_EQ(s.groups[0].nodes.size(), 2u);
  EXPECT_TRUE(s.materialized[e]);  // the division reads it after the group
  EXPECT_TRUE(s.materialized[s1]);
}

TEST(Fusion, ReductionsOverOtherDimsAndIntArithmeticStayNodes) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 32});
  const int32_t i = b.input(DType::kInt64, {4});
  const int32_t s0 = b.node("aten::sum.dim_IntList", {T(x), Arg::int_list({0}), Arg::boolean(false), Arg::none()},
                            DType::kFloat32, {32});
  const int32_t ii = b.node("aten::add.Tensor", {T(i), T(i), Arg::integer(1)}, DType::kInt64, {4});
  b.output(s0);
  b.output(ii);
  const Schedule s = fuse(b.build());
  EXPECT_EQ(s.groups.size(), 0u);
  EXPECT_EQ(count(s, ScheduledStep::Kind::kNode), 2);
}

TEST(Fusion, AReductionToANarrowerTypeStaysANode) {
  // sum(x, dtype=torch.float16) of float32 rounds each term first: not what
  // the interpreter's float32 sum does. float32 or x's own type is taken.
  for (const auto& [dtype, fused] : {std::pair{int64_t{5}, false}, std::pair{int64_t{6}, true}}) {
    GraphBuilder b;
    const int32_t x = b.input(DType::kFloat32, {4, 32});
    const DType out = dtype == 5 ? DType::kFloat16 : DType::kFloat32;
    b.output(b.node("aten::sum.dim_IntList", {T(x), Arg::int_list({-1}), Arg::boolean(false), Arg::integer(dtype)},
                    out, {4}));
    const Schedule s = fuse(b.build());
    EXPECT_EQ(s.groups.size(), fused ? 1u : 0u) << "dtype " << dtype;
  }
}

TEST(Fusion, DifferentShapesMakeDifferentGroups) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 8});
  const int32_t r = b.input(DType::kFloat32, {8});
  const int32_t a = b.node("aten::exp.default", {T(r)}, DType::kFloat32, {8});
  const int32_t c = b.node("aten::mul.Tensor", {T(x), T(a)}, DType::kFloat32, {4, 8});
  b.output(c);
  const Schedule s = fuse(b.build());
  EXPECT_EQ(s.groups.size(), 2u);
  EXPECT_TRUE(s.materialized[a]);
}

TEST(Fusion, ACopyIntoAnInputRunsAfterEveryGroupThatReadsIt) {
  GraphBuilder b;
  const int32_t cache = b.input(DType::kFloat32, {8});
  const int32_t x = b.input(DType::kFloat32, {8});
  const int32_t y = b.node("aten::add.Tensor", {T(cache), T(x), Arg::integer(1)}, DType::kFloat32, {8});
  b.copy_into(cache, x);
  const int32_t z = b.node("aten::mul.Tensor", {T(y), T(y)}, DType::kFloat32, {8});
  b.output(z);
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 3u);  // (add) sealed by the copy, (copy), (mul)
  EXPECT_EQ(s.steps[0].group, 0);
  EXPECT_EQ(s.steps[1].group, 1);
  EXPECT_TRUE(s.materialized[y]);
}

TEST(Fusion, AViewOfAGroupValueIsReadFromMemory) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 4});
  const int32_t a = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 4});
  const int32_t at = b.view(a, {4, 4}, {1, 4});
  const int32_t c = b.node("aten::add.Tensor", {T(a), T(at), Arg::integer(1)}, DType::kFloat32, {4, 4});
  b.output(c);
  const Schedule s = fuse(b.build());
  EXPECT_EQ(s.groups.size(), 2u);
  EXPECT_TRUE(s.materialized[a]);
}

TEST(Fusion, AFullTensorIsAGroupWithoutLoads) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {3, 5});
  const int32_t z = b.node("aten::full.default", {Arg::int_list({3, 5}), F(0.5), Arg::integer(6), Arg::none(),
                                                  Arg::none(), Arg::boolean(false)},
                           DType::kFloat32, {3, 5});
  b.output(b.node("aten::add.Tensor", {T(x), T(z), Arg::integer(1)}, DType::kFloat32, {3, 5}));
  const Graph g = b.build();
  const Schedule s = fuse(g);
  EXPECT_EQ(count(s, ScheduledStep::Kind::kNode), 0);
  ASSERT_EQ(s.groups.size(), 1u);  // the add joins the full's group
  EXPECT_EQ(s.groups[0].nodes.size(), 2u);
}

TEST(Fusion, OpenGroupsReadByOneNodeBecomeOneGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 8});
  const int32_t y = b.input(DType::kFloat32, {4, 8});
  const int32_t a = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 8});
  const int32_t m = b.node("aten::mm.default", {T(y), T(y)}, DType::kFloat32, {4, 8});
  const int32_t n = b.node("aten::neg.default", {T(y)}, DType::kFloat32, {4, 8});
  const int32_t c = b.node("aten::add.Tensor", {T(a), T(n), Arg::integer(1)}, DType::kFloat32, {4, 8});
  const int32_t d = b.node("aten::mul.Tensor", {T(c), T(m)}, DType::kFloat32, {4, 8});
  b.output(d);
  const Schedule s = fuse(b.build());
  // exp's group and neg's become one when the add reads both; the matmul,
  // which reads neither, runs before it.
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].nodes, (std::vector<size_t>{0, 2, 3, 4}));
  ASSERT_EQ(s.steps.size(), 2u);
  EXPECT_EQ(s.steps[0].kind, ScheduledStep::Kind::kNode);
  EXPECT_EQ(s.steps[1].group, 0);
  EXPECT_FALSE(s.materialized[a]);
  EXPECT_FALSE(s.materialized[n]);
  EXPECT_FALSE(s.materialized[c]);
}

TEST(Fusion, AGroupReadByAnotherNodeIsNotMergedLater) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 8});
  const int32_t a = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 8});
  const int32_t m = b.node("aten::mm.default", {T(a), T(x)}, DType::kFloat32, {4, 8});
  const int32_t n = b.node("aten::neg.default", {T(x)}, DType::kFloat32, {4, 8});
  b.output(b.node("aten::add.Tensor", {T(a), T(n), Arg::integer(1)}, DType::kFloat32, {4, 8}));
  b.output(m);
  const Schedule s = fuse(b.build());
  // exp's group was sealed when the matmul read its value: it must run first.
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.steps[0].group, 0);
  EXPECT_EQ(s.steps[1].kind, ScheduledStep::Kind::kNode);
  EXPECT_TRUE(s.materialized[a]);
}

TEST(Fusion, ACopyOfAFunctionOfABufferIntoItEndsThatGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 8});
  const int32_t g = b.input(DType::kFloat32, {4, 1});
  const int32_t e = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 8});
  const int32_t y = b.node("aten::mul.Tensor", {T(e), T(g)}, DType::kFloat32, {4, 8});
  b.copy_into(x, y);  // x.copy_(exp(x) * g)
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].nodes.size(), 3u);
  EXPECT_FALSE(s.materialized[y]);
}

TEST(Fusion, ACopyIntoABufferItsSourceGroupReadsThroughAViewRunsApart) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 4});
  const int32_t xt = b.view(x, {4, 4}, {1, 4});
  const int32_t e = b.node("aten::exp.default", {T(xt)}, DType::kFloat32, {4, 4});
  b.copy_into(x, e);  // x.copy_(exp(x.t())): element (i, j) reads (j, i)
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_TRUE(s.materialized[e]);
}

TEST(Fusion, CopiesIntoSeveralInputsJoinTheGroupComputingThem) {
  // An optimizer's update: the parameter and its moment computed together and
  // copied back into both, in one pass.
  GraphBuilder b;
  const int32_t p = b.input(DType::kFloat32, {64});
  const int32_t g = b.input(DType::kFloat32, {64});
  const int32_t m = b.input(DType::kFloat32, {64});
  const int32_t decayed = b.node("aten::mul.Tensor", {T(m), Arg::real(0.9)}, DType::kFloat32, {64});
  const int32_t m2 = b.node("aten::add.Tensor", {T(decayed), T(g), Arg::integer(1)}, DType::kFloat32, {64});
  const int32_t p2 = b.node("aten::sub.Tensor", {T(p), T(m2), Arg::real(0.01)}, DType::kFloat32, {64});
  b.copy_into(p, p2);
  b.copy_into(m, m2);
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0].nodes.size(), 5u);
  EXPECT_FALSE(s.materialized[m2]);
  EXPECT_FALSE(s.materialized[p2]);
}

TEST(Fusion, ANodeReadingABufferAGroupCopiedIntoRunsAfterThatGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 8});
  const int32_t e = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 8});
  b.copy_into(x, e);
  // Not fusable (a reduction over the first dimension): reads the new x.
  const int32_t total = b.node("aten::sum.dim_IntList", {T(x), Arg::int_list({0}), Arg::boolean(false)},
                               DType::kFloat32, {8});
  // Pointwise over the same shape, after the reader: a group of its own.
  const int32_t twice = b.node("aten::mul.Tensor", {T(e), Arg::real(2.0)}, DType::kFloat32, {4, 8});
  b.output(total);
  b.output(twice);
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 2u);
  ASSERT_EQ(s.steps.size(), 3u);
  EXPECT_EQ(s.steps[0].kind, ScheduledStep::Kind::kFused);  // exp and the copy
  EXPECT_EQ(s.steps[0].group, 0);
  EXPECT_EQ(s.steps[1].kind, ScheduledStep::Kind::kNode);   // the sum reads the copied x
  EXPECT_EQ(s.steps[2].group, 1);
  EXPECT_TRUE(s.materialized[e]);
}

TEST(Fusion, AViewOfABufferAGroupCopiedIntoIsReadAfterThatGroup) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 4});
  const int32_t e = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 4});
  b.copy_into(x, e);
  const int32_t xt = b.view(x, {4, 4}, {1, 4});
  // Reads e (the group's value) and x through a transpose: element (i, j) needs
  // the copy's (j, i), which the group may not have written yet.
  const int32_t y = b.node("aten::mul.Tensor", {T(e), T(xt)}, DType::kFloat32, {4, 4});
  b.output(y);
  const Schedule s = fuse(b.build());
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.steps[0].group, 0);
  EXPECT_EQ(s.steps[1].group, 1);
  EXPECT_TRUE(s.materialized[e]);
}
