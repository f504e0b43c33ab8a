// Programs: buffers and steps from the compiler, the byte format's round trip
// and its errors, and the executor with extern calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "graph_builder.hpp"
#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/graph_format.hpp"
#include "run_helpers.hpp"

using namespace nc_test;

namespace {

// y = relu(x @ w + b) * 2 with the matmul as an extern call "test::mm".
Graph mlp_graph() {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {4, 8});
  const int32_t w = b.input(DType::kFloat32, {8, 3});
  const int32_t bias = b.input(DType::kFloat32, {3});
  const int32_t xe = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {4, 8});
  const int32_t m = b.node("test::mm", {T(xe), T(w)}, DType::kFloat32, {4, 3});
  const int32_t a = b.node("aten::add.Tensor", {T(m), T(bias), Arg::integer(1)}, DType::kFloat32, {4, 3});
  const int32_t r = b.node("aten::relu.default", {T(a)}, DType::kFloat32, {4, 3});
  const int32_t y = b.node("aten::mul.Tensor", {T(r), Arg::real(2.0)}, DType::kFloat32, {4, 3});
  b.output(y);
  b.output(b.view(y, {12}, {1}));  // an output viewing another's storage
  b.output(b.view(x, {8}, {1}, 8));  // an output viewing an input
  b.output(-1);
  return b.build();
}

void test_mm(const Program& p, const RunBuffers& buf, const Step& s) {
  const auto* a = static_cast<const float*>(value_data(p, buf, static_cast<int32_t>(s.node.args[0].i)));
  const auto* w = static_cast<const float*>(value_data(p, buf, static_cast<int32_t>(s.node.args[1].i)));
  auto* out = static_cast<float*>(value_data(p, buf, s.node.outputs[0]));
  const auto& la = p.values[s.node.args[0].i].layout;
  const auto& lw = p.values[s.node.args[1].i].layout;
  for (int64_t i = 0; i < la.sizes[0]; ++i) {
    for (int64_t j = 0; j < lw.sizes[1]; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < la.sizes[1]; ++k) acc += a[i * la.strides[0] + k * la.strides[1]] * w[k * lw.strides[0] + j * lw.strides[1]];
      out[i * 3 + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace

TEST(Program, CompilesStepsBuffersAndTheArena) {
  CompileReport rep;
  const Graph g = mlp_graph();
  const Program p = compile_graph(g, &rep);
  EXPECT_EQ(rep.fused_groups, 2);
  EXPECT_EQ(rep.fused_nodes, 4);
  EXPECT_EQ(rep.extern_calls, 1);
  EXPECT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.output_storage_bytes.size(), 1u);  // y and its view share one storage
  EXPECT_EQ(p.output_storage_bytes[0], 12 * 4);
  // exp(x) and the matmul's result live in the arena, 64-aligned.
  EXPECT_GE(p.arena_bytes, 128 + 64);
  EXPECT_EQ(p.arena_bytes % 64, 0);
  EXPECT_EQ(p.buffers[p.values[g.outputs[2]].buffer].kind, Buffer::Kind::kInput);
}

TEST(Program, RunsWithExternCallsAndMatchesAReference) {
  TestExterns externs;
  externs.ops["test::mm"] = test_mm;
  const Graph g = mlp_graph();
  const CompiledRun r = compile_and_run(g, &externs, 5);
  EXPECT_EQ(externs.calls, 1);
  const auto* x = static_cast<const float*>(r.buffers.inputs[0]);
  const auto* w = static_cast<const float*>(r.buffers.inputs[1]);
  const auto* bias = static_cast<const float*>(r.buffers.inputs[2]);
  const std::vector<double> y = r.output(0);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 8; ++k) acc += std::exp(static_cast<double>(x[i * 8 + k])) * w[k * 3 + j];
      const double want = std::max(0.0, acc + bias[j]) * 2;
      EXPECT_NEAR(y[i * 3 + j], want, 1e-4 * (1 + std::fabs(want)));
    }
  }
  EXPECT_EQ(r.output(1), y);
  const std::vector<double> row = r.output(2);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(row[k], x[8 + k]);
}

TEST(Program, AnExternFailureKeepsItsType) {
  TestExterns externs;  // no test::mm: the callback throws
  try {
    compile_and_run(mlp_graph(), &externs);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "no test extern for test::mm");
  }
  EXPECT_EQ(externs.calls, 1);
}

// Records the observer's calls as "+i" (started) and "-i" (finished).
struct StepLog : StepObserver {
  std::vector<std::string> events;
  void step_started(size_t step) override { events.push_back("+" + std::to_string(step)); }
  void step_finished(size_t step) override { events.push_back("-" + std::to_string(step)); }
};

TEST(Program, AnObserverSeesEachStepStartAndFinishAndStepsHaveNames) {
  const Program p = compile_graph(mlp_graph());
  ASSERT_EQ(p.steps.size(), 3u);
  EXPECT_EQ(p.step_name(1), "test::mm");
  const std::string first = p.step_name(0), last = p.step_name(2);
  EXPECT_EQ(first.rfind("fused [", 0), 0u) << first;
  EXPECT_NE(first.find(": exp (1 node)"), std::string::npos) << first;
  EXPECT_NE(last.find(": add relu mul (3 nodes)"), std::string::npos) << last;
  EXPECT_THROW(p.step_name(3), std::out_of_range);

  TestExterns externs;
  externs.ops["test::mm"] = test_mm;
  StepLog log;
  const CompiledRun r = compile_and_run(mlp_graph(), &externs, 1, neuronkernels::serial_for, &log);
  EXPECT_EQ(log.events, (std::vector<std::string>{"+0", "-0", "+1", "-1", "+2", "-2"}));

  // A failing step is started, not finished, and nothing after it runs.
  TestExterns failing;
  StepLog failed;
  EXPECT_THROW(run_program(r.program, r.buffers, failing, neuronkernels::serial_for, &failed), std::runtime_error);
  EXPECT_EQ(failed.events, (std::vector<std::string>{"+0", "-0", "+1"}));
}

TEST(Program, InputMutationWritesTheCallersBuffer) {
  GraphBuilder b;
  const int32_t cache = b.input(DType::kFloat32, {2, 4});
  const int32_t x = b.input(DType::kFloat32, {4});
  const int32_t row = b.view(cache, {4}, {1}, 4);
  const int32_t y = b.node("aten::add.Tensor", {T(row), T(x), Arg::integer(1)}, DType::kFloat32, {4});
  b.copy_into(row, y);
  b.output(y);
  const Graph g = b.build();
  float c[8] = {0, 1, 2, 3, 4, 5, 6, 7}, xin[4] = {10, 20, 30, 40}, out[4];
  const Program p = compile_graph(g);
  RunBuffers buf{{c, xin}, {out}, nullptr};
  AlignedBytes arena(p.arena_bytes);
  buf.arena = arena.data();
  TestExterns none;
  run_program(p, buf, none);
  const float want[8] = {0, 1, 2, 3, 14, 25, 36, 47};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c[i], want[i]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], want[4 + i]);
}

TEST(ProgramFormat, RoundTripsAndRefusesDamagedBytes) {
  const Program p = compile_text(format_graph(mlp_graph()));
  const std::string bytes = p.serialize();
  EXPECT_EQ(Program::deserialize(bytes), p);
  EXPECT_FALSE(p.describe().empty());
  auto error = [](const std::string& b) {
    try {
      Program::deserialize(b);
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("garbage!").find("bad magic"), std::string::npos);
  EXPECT_NE(error(bytes.substr(0, bytes.size() / 2)).find("truncated"), std::string::npos);
  EXPECT_NE(error(bytes + "x").find("trailing"), std::string::npos);
  std::string other = bytes;
  other[8] = 9;  // the version
  EXPECT_NE(error(other).find("version 9"), std::string::npos);
  // Every truncation is an error, never a crash.
  for (size_t n = 0; n < bytes.size(); n += 7) EXPECT_FALSE(error(bytes.substr(0, n)).empty()) << n;
}

TEST(Program, ACopyOfAFunctionOfAnInputIntoItRunsAsOneGroup) {
  // x.copy_((exp(x) - g) * x + x), one fused group that reads every tile of
  // x before it writes it; rows long enough for several tiles and threads.
  constexpr int64_t kRows = 8, kCols = 3000;
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {kRows, kCols});
  const int32_t g = b.input(DType::kFloat32, {kRows, 1});
  const int32_t e = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {kRows, kCols});
  const int32_t d = b.node("aten::sub.Tensor", {T(e), T(g), Arg::integer(1)}, DType::kFloat32, {kRows, kCols});
  const int32_t m = b.node("aten::mul.Tensor", {T(d), T(x)}, DType::kFloat32, {kRows, kCols});
  const int32_t y = b.node("aten::add.Tensor", {T(m), T(x), Arg::integer(1)}, DType::kFloat32, {kRows, kCols});
  b.copy_into(x, y);
  const Program p = compile_graph(b.build());
  ASSERT_EQ(p.steps.size(), 1u);
  std::vector<float> xs(kRows * kCols), gs(kRows), want(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 97) / 97.0f - 0.5f;
  for (int64_t r = 0; r < kRows; ++r) gs[r] = 0.25f * static_cast<float>(r);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float v = xs[i];
    want[i] = (std::exp(v) - gs[i / kCols]) * v + v;
  }
  RunBuffers buf{{xs.data(), gs.data()}, {}, nullptr};
  AlignedBytes arena(p.arena_bytes);
  buf.arena = arena.data();
  TestExterns none;
  run_program(p, buf, none, threaded_for);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(xs[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << i;
}

TEST(Program, AnInPlaceCopyKeepsTheBuffersOldValuesForLaterMembers) {
  // y = exp(x); z = y * x (an output, computed after y); x.copy_(y). z must
  // read x as it was: y may not be written into x before z's product.
  constexpr int64_t kRows = 4, kCols = 2500;
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {kRows, kCols});
  const int32_t y = b.node("aten::exp.default", {T(x)}, DType::kFloat32, {kRows, kCols});
  const int32_t z = b.node("aten::mul.Tensor", {T(y), T(x)}, DType::kFloat32, {kRows, kCols});
  b.copy_into(x, y);
  b.output(z);
  const Program p = compile_graph(b.build());
  ASSERT_EQ(p.steps.size(), 1u);
  std::vector<float> xs(kRows * kCols), zs(xs.size()), before(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 89) / 89.0f - 0.5f;
  before = xs;
  RunBuffers buf{{xs.data()}, {zs.data()}, nullptr};
  AlignedBytes arena(p.arena_bytes);
  buf.arena = arena.data();
  TestExterns none;
  run_program(p, buf, none, threaded_for);
  for (size_t i = 0; i < xs.size(); ++i) {
    const float e = std::exp(before[i]);
    ASSERT_NEAR(xs[i], e, 1e-5f * (1 + e)) << i;
    ASSERT_NEAR(zs[i], e * before[i], 1e-5f * (1 + std::fabs(e * before[i]))) << i;
  }
}
