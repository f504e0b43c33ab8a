// Integer arithmetic in programs is exact: int64/int32 add and sub (a KV
// cache's position arithmetic) and integer copies into inputs run as native
// steps in integer arithmetic, not through the tile interpreter's float32
// (exact to 2^24 only); an int32 copy is not fused either.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "graph_builder.hpp"
#include "neuroncompiler/compile.hpp"
#include "run_helpers.hpp"

using namespace nc_test;

TEST(IntegerOps, AddAndSubAreExactBeyondTwoToThe24) {
  // out = pos[1, 3] + len[] * 3 ; out2 = len - 1 ; both int64, values near 2^40.
  GraphBuilder b;
  const int32_t pos = b.input(DType::kInt64, {1, 3});
  const int32_t len = b.input(DType::kInt64, {});
  const int32_t sum = b.node("aten::add.Tensor", {T(pos), T(len), Arg::integer(3)}, DType::kInt64, {1, 3});
  const int32_t less = b.node("aten::sub.Tensor", {T(len), Arg::integer(1)}, DType::kInt64, {});
  b.output(sum);
  b.output(less);
  CompileReport rep;
  const Program p = compile_graph(b.build(), &rep);
  EXPECT_EQ(rep.native_kernels, 2);
  EXPECT_EQ(rep.extern_calls, 0);
  EXPECT_EQ(rep.fused_groups, 0);
  const int64_t big = (int64_t{1} << 40) + 1;
  int64_t in_pos[3] = {0, 1, -7};
  int64_t in_len = big;
  int64_t out_sum[3] = {}, out_less = 0;
  RunBuffers buf{{in_pos, &in_len}, {out_sum, &out_less}, nullptr};
  TestExterns none;
  run_program(p, buf, none);
  EXPECT_EQ(out_sum[0], 3 * big);
  EXPECT_EQ(out_sum[1], 3 * big + 1);
  EXPECT_EQ(out_sum[2], 3 * big - 7);
  EXPECT_EQ(out_less, big - 1);
}

TEST(IntegerOps, Int32WrapsAsATenDoes) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kInt32, {2});
  b.output(b.node("aten::add.Tensor", {T(x), Arg::integer(1)}, DType::kInt32, {2}));
  const Program p = compile_graph(b.build());
  int32_t in[2] = {2147483647, 16777217};
  int32_t out[2] = {};
  RunBuffers buf{{in}, {out}, nullptr};
  TestExterns none;
  run_program(p, buf, none);
  EXPECT_EQ(out[0], -2147483647 - 1);
  EXPECT_EQ(out[1], 16777218);
}

TEST(IntegerOps, ACopyIntoAnIntegerInputIsExact) {
  // len = len + 1, copied back into the input (an input mutation).
  GraphBuilder b;
  const int32_t len = b.input(DType::kInt64, {});
  const int32_t next = b.node("aten::add.Tensor", {T(len), Arg::integer(1)}, DType::kInt64, {});
  b.copy_into(len, next);
  b.output(next);
  CompileReport rep;
  const Program p = compile_graph(b.build(), &rep);
  EXPECT_EQ(rep.extern_calls, 0);
  int64_t value = (int64_t{1} << 53) + 1, out = 0;
  RunBuffers buf{{&value}, {&out}, nullptr};
  TestExterns none;
  run_program(p, buf, none);
  EXPECT_EQ(out, (int64_t{1} << 53) + 2);
  EXPECT_EQ(value, (int64_t{1} << 53) + 2);
}

TEST(IntegerOps, AnInt32CopyIsNotFused) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kInt32, {4});
  b.output(b.node("aten::clone.default", {T(x)}, DType::kInt32, {4}));
  CompileReport rep;
  compile_graph(b.build(), &rep);
  EXPECT_EQ(rep.fused_groups, 0);  // through float32 it would round beyond 2^24
  EXPECT_EQ(rep.extern_calls, 1);
}

TEST(IntegerOps, FloatAndMixedAddsStayAsTheyWere) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kInt64, {4});
  const int32_t f = b.input(DType::kFloat32, {4});
  b.output(b.node("aten::add.Tensor", {T(x), Arg::real(0.5)}, DType::kFloat32, {4}));  // a float result
  b.output(b.node("aten::add.Tensor", {T(f), T(f)}, DType::kFloat32, {4}));
  CompileReport rep;
  compile_graph(b.build(), &rep);
  EXPECT_EQ(rep.native_kernels, 0);
}
