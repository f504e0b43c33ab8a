// The pattern pass on hand-built graphs: which subgraphs become native ops
// (the device's kernels), which stay as they are and why, and the native
// steps' results against the reference of the original graph (or a direct
// computation where the reference has no such op).
#include <gtest/gtest.h>

#include <bit>

#include <cmath>

#include "graph_builder.hpp"
#include "neuroncompiler/compile.hpp"
#include "neuroncompiler/native_ops.hpp"
#include "neuroncompiler/patterns.hpp"
#include "run_helpers.hpp"

using namespace nc_test;

namespace {

constexpr int64_t kF32 = 6, kBF16 = 15;  // torch's ScalarType numbers, as _to_copy carries them

Arg cast_args_dtype(int64_t t) { return Arg::integer(t); }

int32_t cast(GraphBuilder& b, int32_t x, DType to, int64_t code, std::vector<int64_t> sizes) {
  return b.node("aten::_to_copy.default",
                {T(x), cast_args_dtype(code), Arg::none(), Arg::none(), Arg::none(), Arg::boolean(false), Arg::none()},
                to, std::move(sizes));
}

// Hugging Face's RMSNorm over [2, 3, C]: weight * (x * rsqrt(mean(x^2) + eps)).to(dtype).
struct RmsGraph {
  Graph g;
  int32_t rsqrt = -1;
};
enum class Leak { kNone, kRsqrt, kMean };  // an intermediate that is also a graph output
RmsGraph rms_graph(DType dtype, int64_t C, Leak leak = Leak::kNone) {
  GraphBuilder b;
  const std::vector<int64_t> s{2, 3, C}, r{2, 3, 1};
  const int32_t x0 = b.input(dtype, s);
  const int32_t w = b.input(dtype, {C});
  const int32_t x = dtype == DType::kFloat32 ? x0 : cast(b, x0, DType::kFloat32, kF32, s);
  const int32_t p = b.node("aten::pow.Tensor_Scalar", {T(x), Arg::integer(2)}, DType::kFloat32, s);
  const int32_t m = b.node("aten::mean.dim", {T(p), Arg::int_list({-1}), Arg::boolean(true), Arg::none()},
                           DType::kFloat32, r);
  const int32_t a = b.node("aten::add.Tensor", {T(m), F(1e-6), Arg::integer(1)}, DType::kFloat32, r);
  const int32_t rs = b.node("aten::rsqrt.default", {T(a)}, DType::kFloat32, r);
  int32_t n = b.node("aten::mul.Tensor", {T(x), T(rs)}, DType::kFloat32, s);
  if (dtype != DType::kFloat32) n = cast(b, n, dtype, kBF16, s);
  b.output(b.node("aten::mul.Tensor", {T(w), T(n)}, dtype, s));
  if (leak == Leak::kRsqrt) b.output(rs);
  if (leak == Leak::kMean) b.output(m);
  return {b.build(), rs};
}

const Step* native_step(const Program& p, std::string_view op) {
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::kNative && s.node.op == op) return &s;
  }
  return nullptr;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t e = 0; e < got.size(); ++e) {
    ASSERT_NEAR(got[e], want[e], tol * (1 + std::fabs(want[e]))) << "element " << e;
  }
}

}  // namespace

TEST(Patterns, HuggingFaceRmsNormIsOneRowNormKernel) {
  const RmsGraph rg = rms_graph(DType::kFloat32, 40);
  CompileReport rep;
  const Program p = compile_graph(rg.g, &rep);
  EXPECT_EQ(rep.native_kernels, 1);
  EXPECT_EQ(rep.native_nodes, 6);
  EXPECT_EQ(rep.fused_groups, 0);
  EXPECT_EQ(rep.extern_calls, 0);
  ASSERT_NE(native_step(p, kNativeRowNorm), nullptr);
  const CompiledRun r = compile_and_run(rg.g, nullptr, 3, threaded_for);
  const Reference ref(rg.g, input_pointers(r));
  expect_close(r.output(0), ref[rg.g.outputs[0]], 2e-6);
}

TEST(Patterns, Bfloat16RmsNormReadsTheInputAndRoundsAsEager) {
  const RmsGraph rg = rms_graph(DType::kBFloat16, 64);
  CompileReport rep;
  compile_graph(rg.g, &rep);
  EXPECT_EQ(rep.native_kernels, 1);
  EXPECT_EQ(rep.native_nodes, 8);  // both casts inside
  const CompiledRun r = compile_and_run(rg.g, nullptr, 4);
  const Reference ref(rg.g, input_pointers(r));
  // One bfloat16 step apart at most: the mean's summation order differs.
  expect_close(r.output(0), ref[rg.g.outputs[0]], 1.0 / 128);
}

TEST(Patterns, AnIntermediateReadElsewhereKeepsTheNodes) {
  const RmsGraph rg = rms_graph(DType::kFloat32, 16, Leak::kMean);
  CompileReport rep;
  compile_graph(rg.g, &rep);
  EXPECT_EQ(rep.native_kernels, 0);
  EXPECT_GT(rep.fused_groups, 0);
  const CompiledRun r = compile_and_run(rg.g);
  const Reference ref(rg.g, input_pointers(r));
  expect_close(r.output(0), ref[rg.g.outputs[0]], 2e-6);
}

TEST(Patterns, ASavedRstdIsWrittenByTheKernel) {
  const RmsGraph rg = rms_graph(DType::kFloat32, 24, Leak::kRsqrt);  // as a training forward saves it
  CompileReport rep;
  compile_graph(rg.g, &rep);
  EXPECT_EQ(rep.native_kernels, 1);
  const CompiledRun r = compile_and_run(rg.g);
  const Reference ref(rg.g, input_pointers(r));
  expect_close(r.output(0), ref[rg.g.outputs[0]], 2e-6);
  expect_close(r.output(1), ref[rg.rsqrt], 2e-6);
}

TEST(Patterns, LayerNormWithItsStatistics) {
  GraphBuilder b;
  const int64_t C = 37;
  const int32_t x = b.input(DType::kFloat32, {5, C});
  const int32_t w = b.input(DType::kFloat32, {C});
  const int32_t bias = b.input(DType::kFloat32, {C});
  const int32_t y = b.value(DType::kFloat32, {5, C});
  const int32_t mean = b.value(DType::kFloat32, {5, 1});
  const int32_t rstd = b.value(DType::kFloat32, {5, 1});
  b.graph().nodes.push_back({"aten::native_layer_norm.default",
                             {T(x), Arg::int_list({C}), T(w), T(bias), F(1e-5)}, {y, mean, rstd}});
  b.output(y);
  b.output(mean);
  b.output(rstd);
  const Graph g = b.build();
  CompileReport rep;
  compile_graph(g, &rep);
  EXPECT_EQ(rep.native_kernels, 1);
  const CompiledRun r = compile_and_run(g, nullptr, 5);
  const auto* xs = static_cast<const float*>(r.buffers.inputs[0]);
  const auto* ws = static_cast<const float*>(r.buffers.inputs[1]);
  const auto* bs = static_cast<const float*>(r.buffers.inputs[2]);
  std::vector<double> want_y, want_m, want_r;
  for (int64_t i = 0; i < 5; ++i) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; ++j) m += xs[i * C + j];
    m /= C;
    for (int64_t j = 0; j < C; ++j) v += (xs[i * C + j] - m) * (xs[i * C + j] - m);
    const double rs = 1 / std::sqrt(v / C + 1e-5);
    for (int64_t j = 0; j < C; ++j) want_y.push_back((xs[i * C + j] - m) * rs * ws[j] + bs[j]);
    want_m.push_back(m);
    want_r.push_back(rs);
  }
  expect_close(r.output(0), want_y, 1e-5);
  expect_close(r.output(1), want_m, 1e-5);
  expect_close(r.output(2), want_r, 1e-5);
}

namespace {

// q_embed = q * cos + cat(-q2, q1) * sin, with q a [B, H, S, D] view of [B, S, H, D] memory.
Graph rope_graph(bool swap_halves) {
  GraphBuilder b;
  const int64_t B = 2, H = 3, S = 4, D = 8, h = D / 2;
  const int32_t mem = b.input(DType::kFloat32, {B, S, H, D});
  const int32_t cos = b.input(DType::kFloat32, {B, 1, S, D});
  const int32_t sin = b.input(DType::kFloat32, {B, 1, S, D});
  const std::vector<int64_t> qs{B, H, S, D}, qst{S * H * D, D, H * D, 1}, hs{B, H, S, h};
  const int32_t q = b.view(mem, qs, qst);
  const int32_t m1 = b.node("aten::mul.Tensor", {T(q), T(cos)}, DType::kFloat32, qs);
  const int32_t q1 = b.view(mem, hs, qst, 0);
  const int32_t q2 = b.view(mem, hs, qst, h);
  const int32_t n = b.node("aten::neg.default", {T(swap_halves ? q1 : q2)}, DType::kFloat32, hs);
  Arg list;
  list.kind = Arg::Kind::kTensorList;
  list.ints = {n, swap_halves ? q2 : q1};
  const int32_t c = b.node("aten::cat.default", {list, Arg::integer(-1)}, DType::kFloat32, qs);
  const int32_t m2 = b.node("aten::mul.Tensor", {T(c), T(sin)}, DType::kFloat32, qs);
  b.output(b.node("aten::add.Tensor", {T(m1), T(m2), Arg::integer(1)}, DType::kFloat32, qs));
  return b.build();
}

}  // namespace

TEST(Patterns, RotaryEmbeddingEqualsEagerBitForBit) {
  const Graph g = rope_graph(false);
  CompileReport rep;
  compile_graph(g, &rep);
  EXPECT_EQ(rep.native_kernels, 1);
  EXPECT_EQ(rep.native_nodes, 5);
  EXPECT_EQ(rep.extern_calls, 0);  // the concatenation is gone
  const CompiledRun r = compile_and_run(g, nullptr, 6);
  const auto* mem = static_cast<const float*>(r.buffers.inputs[0]);
  const auto* cs = static_cast<const float*>(r.buffers.inputs[1]);
  const auto* sn = static_cast<const float*>(r.buffers.inputs[2]);
  const std::vector<double> got = r.output(0);
  for (int64_t bb = 0, e = 0; bb < 2; ++bb)
    for (int64_t hh = 0; hh < 3; ++hh)
      for (int64_t ss = 0; ss < 4; ++ss)
        for (int64_t d = 0; d < 8; ++d, ++e) {
          const float* row = mem + bb * 96 + ss * 24 + hh * 8;
          const float rot = d < 4 ? -row[d + 4] : row[d - 4];
          const float a = row[d] * cs[bb * 32 + ss * 8 + d];
          const float c = rot * sn[bb * 32 + ss * 8 + d];
          ASSERT_EQ(static_cast<float>(got[e]), a + c) << "element " << e;
        }
}

TEST(Patterns, AnotherRotationIsNotTheRotaryKernel) {
  CompileReport rep;
  compile_graph(rope_graph(true), &rep);
  EXPECT_EQ(rep.native_kernels, 0);
}

namespace {

// The gradient autograd writes for rope_graph's rotation, from a bfloat16
// gradient g viewed [B, H, S, D] over [B, S, H, D] memory and cast to float32:
// g*cos + slice_scatter(0, -(g*sin)[..., :h], h..) + slice_scatter(0, (g*sin)[..., h:], ..h).
// swap_halves: each scatter takes the other half (not the rotation's
// transpose); zeros: how many zero fills the scatters take (1 as after CSE;
// 0: one that another node reads too, as CSE shares one among layers).
Graph rope_backward_graph(bool swap_halves, int zeros_made) {
  GraphBuilder b;
  const int64_t B = 2, H = 3, S = 4, D = 8, h = D / 2;
  const DType f = DType::kFloat32;
  const int32_t mem = b.input(DType::kBFloat16, {B, S, H, D});
  const int32_t cos = b.input(f, {B, 1, S, D});
  const int32_t sin = b.input(f, {B, 1, S, D});
  const std::vector<int64_t> qs{B, H, S, D}, hs{B, H, S, h}, contiguous{H * S * D, S * D, D, 1};
  const int32_t g = cast(b, b.view(mem, qs, {S * H * D, D, H * D, 1}), f, kF32, qs);
  const int32_t gs = b.node("aten::mul.Tensor", {T(g), T(sin)}, f, qs);
  const int32_t lower = b.view(gs, hs, contiguous, 0), upper = b.view(gs, hs, contiguous, h);
  const int32_t neg = b.node("aten::neg.default", {T(swap_halves ? upper : lower)}, f, hs);
  auto zeros = [&] {
    return b.node("aten::full.default", {Arg::int_list(qs), Arg::integer(0), Arg::integer(kF32), Arg::none(),
                                         Arg::none(), Arg::boolean(false)}, f, qs);
  };
  const int32_t z1 = zeros(), z2 = zeros_made == 2 ? zeros() : z1;
  if (zeros_made == 0) b.output(b.node("aten::mul.Tensor", {T(z1), F(2.0)}, f, qs));
  const int32_t high = b.node("aten::slice_scatter.default",
                              {T(z1), T(neg), Arg::integer(3), Arg::integer(h), Arg::integer(INT64_MAX), Arg::integer(1)},
                              f, qs);
  const int32_t low = b.node("aten::slice_scatter.default",
                             {T(z2), T(swap_halves ? lower : upper), Arg::integer(-1), Arg::integer(0), Arg::integer(h),
                              Arg::integer(1)}, f, qs);
  const int32_t sum = b.node("aten::add.Tensor", {T(high), T(low), Arg::integer(1)}, f, qs);
  const int32_t gc = b.node("aten::mul.Tensor", {T(cos), T(g)}, f, qs);
  b.output(b.node("aten::add.Tensor", {T(gc), T(sum), Arg::integer(1)}, f, qs));
  return b.build();
}

}  // namespace

TEST(Patterns, RotaryEmbeddingsGradientIsTheBackwardKernelBitForBit) {
  for (int zeros : {1, 2, 0}) {
    SCOPED_TRACE(zeros);
    const Graph g = rope_backward_graph(false, zeros);
    CompileReport rep;
    compile_graph(g, &rep);
    EXPECT_EQ(rep.native_kernels, 1);
    EXPECT_EQ(rep.native_nodes, 8 + zeros);  // the cast of g too; a fill read elsewhere stays
    EXPECT_EQ(rep.extern_calls, 0);          // the slice_scatters are gone
    const CompiledRun r = compile_and_run(g, nullptr, 8);
    const auto* mem = static_cast<const uint16_t*>(r.buffers.inputs[0]);
    const auto* cs = static_cast<const float*>(r.buffers.inputs[1]);
    const auto* sn = static_cast<const float*>(r.buffers.inputs[2]);
    const std::vector<double> got = r.output(g.outputs.size() - 1);
    for (int64_t bb = 0, e = 0; bb < 2; ++bb)
      for (int64_t hh = 0; hh < 3; ++hh)
        for (int64_t ss = 0; ss < 4; ++ss)
          for (int64_t d = 0; d < 8; ++d, ++e) {
            auto grad = [&](int64_t dd) {
              return std::bit_cast<float>(static_cast<uint32_t>(mem[bb * 96 + ss * 24 + hh * 8 + dd]) << 16);
            };
            const int64_t row = bb * 32 + ss * 8, other = d < 4 ? d + 4 : d - 4;
            const float moved = grad(other) * sn[row + other];
            const float want = grad(d) * cs[row + d] + (d < 4 ? moved : -moved);
            ASSERT_EQ(static_cast<float>(got[e]), want) << "element " << e;
          }
  }
}

TEST(Patterns, ScattersOfTheOtherHalvesAreNotTheRotarysGradient) {
  CompileReport rep;
  compile_graph(rope_backward_graph(true, 1), &rep);
  EXPECT_EQ(rep.native_kernels, 0);
}

namespace {

// The device's fused attention node as serialize.py writes it: 9 result slots.
Graph attention_graph(double dropout, bool with_lse) {
  GraphBuilder b;
  const int32_t q = b.input(DType::kFloat32, {1, 4, 3, 8});
  const int32_t k = b.input(DType::kFloat32, {1, 2, 5, 8});
  const int32_t v = b.input(DType::kFloat32, {1, 2, 5, 8});
  const int32_t mask = b.input(DType::kFloat32, {1, 1, 3, 5});
  const int32_t out = b.value(DType::kFloat32, {1, 4, 3, 8});
  const int32_t lse = with_lse ? b.value(DType::kFloat32, {1, 4, 3}) : -1;
  b.graph().nodes.push_back({"aten::_scaled_dot_product_fused_attention_overrideable.default",
                             {T(q), T(k), T(v), T(mask), F(dropout), Arg::boolean(false), Arg::boolean(false), F(0.25)},
                             {out, lse, -1, -1, -1, -1, -1, -1, -1}});
  b.output(out);
  if (with_lse) b.output(lse);
  return b.build();
}

}  // namespace

TEST(Patterns, FusedAttentionRunsTheAttentionKernel) {
  const Graph g = attention_graph(0.0, true);
  CompileReport rep;
  compile_graph(g, &rep);
  EXPECT_EQ(rep.native_kernels, 1);
  const CompiledRun r = compile_and_run(g, nullptr, 7);
  auto in = [&](size_t i) { return static_cast<const float*>(r.buffers.inputs[i]); };
  const std::vector<double> got = r.output(0), lse = r.output(1);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<double> s(5);
      double mx = -1e300, sum = 0;
      for (int64_t j = 0; j < 5; ++j) {
        double d = 0;
        for (int64_t c = 0; c < 8; ++c) d += in(0)[(h * 3 + i) * 8 + c] * in(1)[((h / 2) * 5 + j) * 8 + c];
        s[j] = d * 0.25 + in(3)[i * 5 + j];
        mx = std::max(mx, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      EXPECT_NEAR(lse[h * 3 + i], mx + std::log(sum), 1e-5);
      for (int64_t c = 0; c < 8; ++c) {
        double o = 0;
        for (int64_t j = 0; j < 5; ++j) o += s[j] / sum * in(2)[((h / 2) * 5 + j) * 8 + c];
        ASSERT_NEAR(got[(h * 3 + i) * 8 + c], o, 1e-5);
      }
    }
}

TEST(Patterns, AttentionWithDropoutIsNotLowered) {
  EXPECT_THROW(compile_graph(attention_graph(0.1, false)), NotLowered);
}

TEST(Patterns, NativeStepsRoundTripThroughBytes) {
  const Program p = compile_graph(rope_graph(false));
  const Program back = Program::deserialize(p.serialize());
  EXPECT_EQ(back, p);
  EXPECT_NE(p.describe().find("native neuron::rope (5 graph nodes)"), std::string::npos) << p.describe();
}

TEST(Patterns, ScalarConstantsBecomeImmediatesOfTheirGroup) {
  // SDPA's boolean mask as the attention takes it: where(mask, 0, -inf).
  GraphBuilder b;
  const int32_t mask = b.input(DType::kBool, {1, 1, 2, 8});
  const int32_t ninf = b.node("aten::scalar_tensor.default", {F(-INFINITY), Arg::integer(6)}, DType::kFloat32, {});
  const int32_t zero = b.node("aten::scalar_tensor.default", {F(0.0), Arg::integer(6)}, DType::kFloat32, {});
  b.output(b.node("aten::where.self", {T(mask), T(zero), T(ninf)}, DType::kFloat32, {1, 1, 2, 8}));
  const Graph g = b.build();
  CompileReport rep;
  compile_graph(g, &rep);
  EXPECT_EQ(rep.folded, 2);
  EXPECT_EQ(rep.extern_calls, 0);
  EXPECT_EQ(rep.fused_groups, 1);
  const CompiledRun r = compile_and_run(g, nullptr, 8);
  const auto* m = static_cast<const uint8_t*>(r.buffers.inputs[0]);
  const std::vector<double> got = r.output(0);
  for (size_t e = 0; e < 16; ++e) EXPECT_EQ(got[e], m[e] ? 0.0 : -INFINITY) << e;
}

namespace {

const Step* extern_step(const Program& p, std::string_view op) {
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::kExtern && s.node.op == op) return &s;
  }
  return nullptr;
}

// addmm(c, a.float(), b.t().float()) (or mm without c) of bfloat16 a [8, 16]
// and b [4, 16] read transposed; `keep_cast` also outputs a's cast.
Graph upcast_matmul_graph(bool addmm, bool keep_cast, DType source = DType::kBFloat16) {
  GraphBuilder b;
  const int32_t a = b.input(source, {8, 16});
  const int32_t bt = b.input(source, {4, 16});
  const int32_t c = b.input(DType::kFloat32, {4});
  const int32_t b_view = b.view(bt, {16, 4}, {1, 16});
  const int32_t af = cast(b, a, DType::kFloat32, kF32, {8, 16});
  const int32_t bf = cast(b, b_view, DType::kFloat32, kF32, {16, 4});
  const int32_t y = addmm ? b.node("aten::addmm.default", {T(c), T(af), T(bf), F(0.5), F(2.0)}, DType::kFloat32, {8, 4})
                          : b.node("aten::mm.default", {T(af), T(bf)}, DType::kFloat32, {8, 4});
  b.output(y);
  if (keep_cast) b.output(af);
  return b.build();
}

}  // namespace

TEST(Patterns, MatrixProductsOfUpcastBfloat16AreOneMixedPrecisionGemm) {
  for (bool addmm : {false, true}) {
    SCOPED_TRACE(addmm ? "addmm" : "mm");
    CompileReport rep;
    const Program p = compile_graph(upcast_matmul_graph(addmm, false), &rep);
    const Step* s = extern_step(p, addmm ? "aten::addmm.dtype" : "aten::mm.dtype");
    ASSERT_NE(s, nullptr) << p.describe();
    EXPECT_EQ(p.steps.size(), 1u) << p.describe();  // the casts are gone
    EXPECT_EQ(s->graph_nodes, 3);
    EXPECT_EQ(rep.library_calls, 1);
    // Reads the bfloat16 inputs (b through its transposed view), float32 out.
    const size_t first = addmm ? 1 : 0;
    EXPECT_EQ(p.values[s->node.args[first].i].layout.dtype, DType::kBFloat16);
    EXPECT_EQ(p.values[s->node.args[first + 1].i].layout.strides, (std::vector<int64_t>{1, 16}));
    EXPECT_EQ(s->node.args[first + 2].i, kF32);
    if (addmm) {
      EXPECT_EQ(s->node.args[4].scalar(), 0.5);
      EXPECT_EQ(s->node.args[5].scalar(), 2.0);
    }
    EXPECT_EQ(Program::deserialize(p.serialize()), p);
  }
}

TEST(Patterns, WithoutAMixedPrecisionGemmTheCastsAndTheFloat32ProductStay) {
  CompileOptions options;
  options.patterns.mixed_precision_gemm = false;
  CompileReport rep;
  const Program p = compile_graph(upcast_matmul_graph(true, false), &rep, options);
  EXPECT_EQ(extern_step(p, "aten::addmm.dtype"), nullptr) << p.describe();
  EXPECT_NE(extern_step(p, "aten::addmm.default"), nullptr) << p.describe();
  EXPECT_EQ(rep.fused_nodes, 2) << p.describe();  // the two casts
}

TEST(Patterns, AnUpcastReadElsewhereStaysAndOtherTypesAreNotRewritten) {
  const Program kept = compile_graph(upcast_matmul_graph(true, true));
  EXPECT_NE(extern_step(kept, "aten::addmm.dtype"), nullptr) << kept.describe();
  EXPECT_EQ(kept.steps.size(), 2u) << kept.describe();  // a's cast, an output, still runs
  // float16 operands keep their casts and the float32 product.
  const Program half = compile_graph(upcast_matmul_graph(true, false, DType::kFloat16));
  EXPECT_EQ(extern_step(half, "aten::addmm.dtype"), nullptr) << half.describe();
  EXPECT_NE(extern_step(half, "aten::addmm.default"), nullptr) << half.describe();
}

namespace {

// base = x * 2 [10, 4]; e = embedding_dense_backward(grad [2, 3, 4], idx [2, 3], 10,
// padding_idx, False); out = base + e (or e + base): a tied embedding's weight
// gradient. With `base_output`, base is a graph output too.
Graph embedding_grad_graph(bool base_first, bool base_output, int64_t padding_idx = 4) {
  GraphBuilder b;
  const int32_t x = b.input(DType::kFloat32, {10, 4});
  const int32_t grad = b.input(DType::kFloat32, {2, 3, 4});
  const int32_t idx = b.input(DType::kInt64, {2, 3});
  const int32_t base = b.node("aten::mul.Tensor", {T(x), F(2.0)}, DType::kFloat32, {10, 4});
  const int32_t e = b.node("aten::embedding_dense_backward.default",
                           {T(grad), T(idx), Arg::integer(10), Arg::integer(padding_idx), Arg::boolean(false)},
                           DType::kFloat32, {10, 4});
  b.output(b.node("aten::add.Tensor", {T(base_first ? base : e), T(base_first ? e : base)}, DType::kFloat32, {10, 4}));
  if (base_output) b.output(base);
  return b.build();
}

// Runs `g`'s program on random floats and the token indices `rows`.
CompiledRun run_with_indices(const Graph& g, const std::vector<int64_t>& rows) {
  CompiledRun r = compile_with_inputs(g, 11);
  std::memcpy(r.inputs[2].data(), rows.data(), rows.size() * sizeof(int64_t));
  TestExterns none;
  run_program(r.program, r.buffers, none);
  return r;
}

int count_native(const Program& p, std::string_view op) {
  int n = 0;
  for (const Step& s : p.steps) n += s.kind == Step::Kind::kNative && s.node.op == op;
  return n;
}

}  // namespace

TEST(Patterns, ATiedEmbeddingsGradientAddsItsRowsInPlace) {
  // Rows 7 and 1 twice (summed in token order first), row 4 the padding row
  // (skipped), the others untouched: 2x plus each row's sum, as eager's
  // zero-filled gradient plus the add.
  const std::vector<int64_t> rows{7, 1, 4, 7, 0, 1};
  for (bool base_first : {true, false}) {
    const Graph g = embedding_grad_graph(base_first, false);
    const CompiledRun r = run_with_indices(g, rows);
    EXPECT_EQ(count_native(r.program, kNativeEmbeddingBackwardAdd), 1) << r.program.describe();
    for (const Step& s : r.program.steps) EXPECT_NE(s.node.op, "aten::embedding_dense_backward.default");
    const auto* x = static_cast<const float*>(r.buffers.inputs[0]);
    const auto* grad = static_cast<const float*>(r.buffers.inputs[1]);
    const std::vector<double> out = r.output(0);
    for (int64_t k = 0; k < 10; ++k) {
      for (int64_t d = 0; d < 4; ++d) {
        float sum = 0.0f;
        for (size_t t = 0; t < rows.size(); ++t) {
          if (rows[t] == k && k != 4) sum += grad[t * 4 + d];
        }
        const float want = x[k * 4 + d] * 2.0f + sum;
        EXPECT_EQ(static_cast<float>(out[k * 4 + d]), want) << "row " << k << " column " << d;
      }
    }
  }
}

TEST(Patterns, AnEmbeddingsGradientAddedToAValueReadElsewhereStays) {
  const Program p = compile_graph(embedding_grad_graph(true, true));
  EXPECT_EQ(count_native(p, kNativeEmbeddingBackwardAdd), 0) << p.describe();
}

TEST(Patterns, AnIndexPastTheEmbeddingsRowsIsAnErrorNamingIt) {
  try {
    run_with_indices(embedding_grad_graph(true, false), {7, 1, 4, 12, 0, 1});
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("index 12 is out of bounds for a weight of 10 rows"), std::string::npos)
        << e.what();
  }
}
