// The serialized graph: round trip and the errors of malformed text.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_builder.hpp"
#include "neuroncompiler/graph_format.hpp"

using namespace nc_test;

namespace {

Graph sample() {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {2, 3});
  const int32_t w = b.input(DType::kBFloat16, {3, 4});
  const int32_t xt = b.view(x, {3, 2}, {1, 3});
  const int32_t y = b.node("aten::mm.default", {T(xt), T(w)}, DType::kFloat32, {3, 4});
  Arg list;
  list.kind = Arg::Kind::kTensorList;
  list.ints = {y, -1};
  Arg floats;
  floats.kind = Arg::Kind::kFloatList;
  floats.floats = {0.5, -1e-7};
  Arg dev;
  dev.kind = Arg::Kind::kDevice;
  dev.i = 1;
  Arg str;
  str.kind = Arg::Kind::kString;
  str.s = "tanh";
  const int32_t z = b.node("test::everything", {list, floats, dev, str, Arg::none(), Arg::boolean(true),
                                                Arg::int_list({-1, 2}), F(INFINITY), Arg::integer(-3)},
                           DType::kFloat32, {3, 4});
  b.copy_into(x, x);
  b.output(z);
  b.output(-1);
  b.output(xt);
  return b.build();
}

std::string error_of(const std::string& text) {
  try {
    parse_graph(text);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GraphFormat, RoundTripsEveryArgumentKind) {
  const Graph g = sample();
  const std::string text = format_graph(g);
  const Graph back = parse_graph(text);
  EXPECT_EQ(format_graph(back), text);
  ASSERT_EQ(back.nodes.size(), g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) EXPECT_EQ(back.nodes[i], g.nodes[i]);
  EXPECT_EQ(back.outputs, g.outputs);
  EXPECT_EQ(back.input_names, g.input_names);
  EXPECT_EQ(back.values[2].base, 0);
  EXPECT_EQ(back.values[2].layout.strides, (std::vector<int64_t>{1, 3}));
}

TEST(GraphFormat, ErrorsNameTheLineAndToken) {
  EXPECT_NE(error_of("").find("empty"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 2\nend\n").find("version 2"), std::string::npos);
  EXPECT_NE(error_of("graph 1\n").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 1\nvalue 0 float33 - 0 0\nend\n").find("unknown dtype 'float33'"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 1\nvalue 1 float32 - 0 0\nend\n").find("count up from 0"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 1\nvalue 0 float32 - 0 2 3\nend\n").find("line 2: expected a size"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 1\nvalue 0 float32 - 0 1 x 1\nend\n").find("'x'"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 1\nfrobnicate\nend\n").find("unknown record 'frobnicate'"), std::string::npos);
  EXPECT_NE(error_of("neurongraph 1\nvalue 0 float32 - 0 0\ninput %0 x\n").find("truncated"), std::string::npos);
  const std::string bad_arg = "neurongraph 1\nvalue 0 float32 - 0 0\ninput %0 x\nnode aten::neg.default 0 1 q1\nend\n";
  EXPECT_NE(error_of(bad_arg).find("line 4: unknown argument kind 'q'"), std::string::npos);
  const std::string use_before = "neurongraph 1\nvalue 0 float32 - 0 0\nvalue 1 float32 - 0 0\n"
                                 "node aten::neg.default 1 %1 1 %0\noutput %1\nend\n";
  EXPECT_NE(error_of(use_before).find("node 0 (aten::neg.default): uses %0 before it is defined"), std::string::npos);
  const std::string view_of_view = "neurongraph 1\nvalue 0 float32 - 0 1 4 1\nvalue 1 float32 %0 0 1 2 1\n"
                                   "value 2 float32 %1 0 1 1 1\ninput %0 x\noutput %2\nend\n";
  EXPECT_NE(error_of(view_of_view).find("itself a view"), std::string::npos);
}
