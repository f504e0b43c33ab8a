// Recurrent cells against a double-precision reference: LSTM and GRU,
// forward and backward, with and without biases, padded rows (row strides
// above the width), hidden sizes with chunk tails, 16-bit types, missing
// output gradients, several threads; at the level TORCHNEURON_ISA forces.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "neuronkernels/rnn.hpp"
#include "test_buffers.hpp"

namespace nk = neuronkernels;

namespace {

using nk_test::Buffer;

struct Case {
  const char* name;
  int64_t B, H;
  bool bias;
  nk::DType dtype;
  int64_t pad;  // extra elements at the end of each row
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Rows of `cols` values (stride cols + pad), random normal.
struct Mat {
  Buffer buf;
  int64_t cols, stride;
  Mat(nk::DType t, int64_t rows, int64_t c, int64_t pad, std::mt19937& gen, double scale = 1.0)
      : buf(t, size_t(rows * (c + pad))), cols(c), stride(c + pad) {
    std::normal_distribution<double> n01(0.0, scale);
    for (size_t i = 0; i < size_t(rows * stride); ++i) buf.set(i, n01(gen));
  }
  double at(int64_t r, int64_t c) const { return buf.get(size_t(r * stride + c)); }
  nk::Rows rows() { return {buf.data(), stride}; }
};

double tolerance(nk::DType t) { return t == nk::DType::kFloat32 ? 2e-6 : (t == nk::DType::kBFloat16 ? 1.6e-2 : 2e-3); }

void expect_near(const char* what, double got, double want, nk::DType t) {
  const double tol = tolerance(t) * (1.0 + std::fabs(want));
  ASSERT_NEAR(got, want, tol) << what;
}

class RnnCell : public ::testing::TestWithParam<Case> {};

TEST_P(RnnCell, Lstm) {
  const Case c = GetParam();
  const int64_t B = c.B, H = c.H, P = c.pad;
  std::mt19937 gen(3);
  Mat ig(c.dtype, B, 4 * H, P, gen), hg(c.dtype, B, 4 * H, P, gen), bi(c.dtype, 1, 4 * H, 0, gen),
      bh(c.dtype, 1, 4 * H, 0, gen), cx(c.dtype, B, H, P, gen), hy(c.dtype, B, H, P, gen),
      cy(c.dtype, B, H, P, gen), ws(c.dtype, B, 4 * H, P, gen), ghy(c.dtype, B, H, P, gen),
      gcy(c.dtype, B, H, P, gen), gg(c.dtype, B, 4 * H, P, gen), gcx(c.dtype, B, H, P, gen);
  nk::LstmCellForwardParams f;
  f.dtype = c.dtype;
  f.batch = B;
  f.hidden = H;
  f.input_gates = ig.rows();
  f.hidden_gates = hg.rows();
  if (c.bias) {
    f.input_bias = bi.buf.data();
    f.hidden_bias = bh.buf.data();
  }
  f.cx = cx.rows();
  f.hy = hy.rows();
  f.cy = cy.rows();
  f.workspace = ws.rows();
  nk::lstm_cell_forward(f, nk_test::threaded_for);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      double g[4];
      for (int k = 0; k < 4; ++k) {
        g[k] = ig.at(b, k * H + j) + hg.at(b, k * H + j) +
               (c.bias ? bi.at(0, k * H + j) + bh.at(0, k * H + j) : 0.0);
      }
      const double i = sig(g[0]), fg = sig(g[1]), gg_ = std::tanh(g[2]), o = sig(g[3]);
      const double cyv = fg * cx.at(b, j) + i * gg_;
      expect_near("cy", cy.at(b, j), cyv, c.dtype);
      expect_near("hy", hy.at(b, j), o * std::tanh(cyv), c.dtype);
      expect_near("workspace", ws.at(b, 2 * H + j), gg_, c.dtype);
    }
  }
  // Backward from the stored workspace and cy, once without grad_cy.
  for (bool with_gcy : {true, false}) {
    nk::LstmCellBackwardParams q;
    q.dtype = c.dtype;
    q.batch = B;
    q.hidden = H;
    q.grad_hy = ghy.rows();
    if (with_gcy) q.grad_cy = gcy.rows();
    q.cx = cx.rows();
    q.cy = cy.rows();
    q.workspace = ws.rows();
    q.grad_gates = gg.rows();
    q.grad_cx = gcx.rows();
    nk::lstm_cell_backward(q, nk_test::threaded_for);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const double i = ws.at(b, j), fg = ws.at(b, H + j), g = ws.at(b, 2 * H + j),
                     o = ws.at(b, 3 * H + j), t = std::tanh(cy.at(b, j));
        const double dc = ghy.at(b, j) * o * (1 - t * t) + (with_gcy ? gcy.at(b, j) : 0.0);
        expect_near("d_i", gg.at(b, j), dc * g * i * (1 - i), c.dtype);
        expect_near("d_f", gg.at(b, H + j), dc * cx.at(b, j) * fg * (1 - fg), c.dtype);
        expect_near("d_g", gg.at(b, 2 * H + j), dc * i * (1 - g * g), c.dtype);
        expect_near("d_o", gg.at(b, 3 * H + j), ghy.at(b, j) * t * o * (1 - o), c.dtype);
        expect_near("grad_cx", gcx.at(b, j), dc * fg, c.dtype);
      }
    }
  }
}

TEST_P(RnnCell, Gru) {
  const Case c = GetParam();
  const int64_t B = c.B, H = c.H, P = c.pad;
  std::mt19937 gen(5);
  Mat ig(c.dtype, B, 3 * H, P, gen), hg(c.dtype, B, 3 * H, P, gen), bi(c.dtype, 1, 3 * H, 0, gen),
      bh(c.dtype, 1, 3 * H, 0, gen), hx(c.dtype, B, H, P, gen), hy(c.dtype, B, H, P, gen),
      ws(c.dtype, B, 5 * H, P, gen), ghy(c.dtype, B, H, P, gen), gi(c.dtype, B, 3 * H, P, gen),
      gh(c.dtype, B, 3 * H, P, gen), ghx(c.dtype, B, H, P, gen);
  nk::GruCellForwardParams f;
  f.dtype = c.dtype;
  f.batch = B;
  f.hidden = H;
  f.input_gates = ig.rows();
  f.hidden_gates = hg.rows();
  if (c.bias) {
    f.input_bias = bi.buf.data();
    f.hidden_bias = bh.buf.data();
  }
  f.hx = hx.rows();
  f.hy = hy.rows();
  f.workspace = ws.rows();
  nk::gru_cell_forward(f, nk_test::threaded_for);
  auto b_i = [&](int64_t k) { return c.bias ? bi.at(0, k) : 0.0; };
  auto b_h = [&](int64_t k) { return c.bias ? bh.at(0, k) : 0.0; };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const double r = sig(ig.at(b, j) + hg.at(b, j) + b_i(j) + b_h(j));
      const double z = sig(ig.at(b, H + j) + hg.at(b, H + j) + b_i(H + j) + b_h(H + j));
      const double hn = hg.at(b, 2 * H + j) + b_h(2 * H + j);
      const double n = std::tanh(ig.at(b, 2 * H + j) + b_i(2 * H + j) + r * hn);
      expect_near("hy", hy.at(b, j), n + z * (hx.at(b, j) - n), c.dtype);
      expect_near("ws hn", ws.at(b, 4 * H + j), hn, c.dtype);
      ASSERT_EQ(ws.at(b, 3 * H + j), hx.at(b, j));
    }
  }
  nk::GruCellBackwardParams q;
  q.dtype = c.dtype;
  q.batch = B;
  q.hidden = H;
  q.grad_hy = ghy.rows();
  q.workspace = ws.rows();
  q.grad_input_gates = gi.rows();
  q.grad_hidden_gates = gh.rows();
  q.grad_hx = ghx.rows();
  nk::gru_cell_backward(q, nk_test::threaded_for);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      const double r = ws.at(b, j), z = ws.at(b, H + j), n = ws.at(b, 2 * H + j),
                   h = ws.at(b, 3 * H + j), hn = ws.at(b, 4 * H + j), go = ghy.at(b, j);
      const double dn = go * (1 - z) * (1 - n * n);
      expect_near("d_r", gi.at(b, j), dn * hn * r * (1 - r), c.dtype);
      expect_near("d_z", gi.at(b, H + j), go * (h - n) * z * (1 - z), c.dtype);
      expect_near("d_n input", gi.at(b, 2 * H + j), dn, c.dtype);
      expect_near("d_r hidden", gh.at(b, j), gi.at(b, j), c.dtype);
      expect_near("d_n hidden", gh.at(b, 2 * H + j), dn * r, c.dtype);
      expect_near("grad_hx", ghx.at(b, j), go * z, c.dtype);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RnnCell,
    ::testing::Values(Case{"f32_bias", 5, 70, true, nk::DType::kFloat32, 0},
                      Case{"f32_nobias_padded", 3, 33, false, nk::DType::kFloat32, 7},
                      Case{"f32_many_rows", 300, 256, true, nk::DType::kFloat32, 0},
                      Case{"bf16", 4, 130, true, nk::DType::kBFloat16, 3},
                      Case{"f16", 4, 65, true, nk::DType::kFloat16, 0},
                      Case{"one_row", 1, 1, true, nk::DType::kFloat32, 0},
                      Case{"empty", 0, 16, true, nk::DType::kFloat32, 0}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
