// A naive scalar reference for the tests: evaluates a graph of pointwise ops
// and last-dim reductions element by element in double, rounding each node's
// result to its dtype as eager PyTorch stores it, reading inputs through
// their layouts. Extern ops are not covered (tests give them their own check).
#pragma once

#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <vector>

#include "neuroncompiler/ir.hpp"

namespace nc_test {

using namespace neuroncompiler;

inline float bf16_round(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return f;
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

inline double round_to(DType t, double v) {
  switch (t) {
    case DType::kFloat32: return static_cast<float>(v);
    case DType::kBFloat16: return bf16_round(static_cast<float>(v));
    case DType::kFloat16: return static_cast<float>(static_cast<_Float16>(static_cast<float>(v)));
    case DType::kBool: return v != 0 ? 1 : 0;
    case DType::kInt64: case DType::kInt32: return std::trunc(v);
    default: return v;
  }
}

inline double read_element(DType t, const void* p) {
  switch (t) {
    case DType::kFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::kBFloat16: { uint16_t h; std::memcpy(&h, p, 2); return std::bit_cast<float>(uint32_t(h) << 16); }
    case DType::kFloat16: { _Float16 h; std::memcpy(&h, p, 2); return static_cast<float>(h); }
    case DType::kInt64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kBool: case DType::kUInt8: return *static_cast<const uint8_t*>(p);
    default: throw std::runtime_error("reference: dtype");
  }
}

inline void write_element(DType t, void* p, double v) {
  switch (t) {
    case DType::kFloat32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); return; }
    case DType::kBFloat16: { uint32_t u = std::bit_cast<uint32_t>(bf16_round(static_cast<float>(v))); uint16_t h = u >> 16; std::memcpy(p, &h, 2); return; }
    case DType::kFloat16: { _Float16 h = static_cast<_Float16>(static_cast<float>(v)); std::memcpy(p, &h, 2); return; }
    case DType::kInt64: { int64_t i = static_cast<int64_t>(v); std::memcpy(p, &i, 8); return; }
    case DType::kInt32: { int32_t i = static_cast<int32_t>(v); std::memcpy(p, &i, 4); return; }
    case DType::kBool: case DType::kUInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v != 0); return;
    default: throw std::runtime_error("reference: dtype");
  }
}

// Logical (row-major) element values of every value the reference computes.
class Reference {
 public:
  Reference(const Graph& g, const std::vector<const void*>& inputs) : g_(g) {
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      const Layout& l = g.value(g.inputs[i]).layout;
      std::vector<double> v(static_cast<size_t>(l.numel()));
      for (int64_t e = 0; e < l.numel(); ++e) {
        v[e] = read_element(l.dtype, static_cast<const char*>(inputs[i]) + memory_index(l, e) * dtype_size(l.dtype));
      }
      vals_[g.inputs[i]] = v;
      mem_[g.inputs[i]] = inputs[i];
    }
    for (const Node& n : g.nodes) eval(n);
  }
  const std::vector<double>& operator[](int32_t id) const { return vals_.at(id); }

  static int64_t memory_index(const Layout& l, int64_t logical) {
    int64_t idx = l.offset;
    for (size_t d = l.sizes.size(); d-- > 0;) {
      idx += (logical % l.sizes[d]) * l.strides[d];
      logical /= l.sizes[d];
    }
    return idx;
  }

 private:
  // Element `e` of output shape `shape` read from `id` with broadcasting.
  double at(int32_t id, const std::vector<int64_t>& shape, int64_t e) {
    const Value& v = g_.value(id);
    if (v.is_view()) {
      // Views read their base input's memory.
      const Layout& l = v.layout;
      int64_t idx = 0, rem = e;
      std::vector<int64_t> coord(shape.size());
      for (size_t d = shape.size(); d-- > 0;) { coord[d] = rem % shape[d]; rem /= shape[d]; }
      idx = l.offset;
      const size_t off = shape.size() - l.sizes.size();
      for (size_t k = 0; k < l.sizes.size(); ++k) if (l.sizes[k] != 1) idx += coord[off + k] * l.strides[k];
      return read_element(l.dtype, static_cast<const char*>(mem_.at(v.base)) + idx * dtype_size(l.dtype));
    }
    const auto& data = vals_.at(id);
    const auto& sizes = v.layout.sizes;
    int64_t rem = e, flat = 0, mult = 1;
    std::vector<int64_t> coord(shape.size());
    for (size_t d = shape.size(); d-- > 0;) { coord[d] = rem % shape[d]; rem /= shape[d]; }
    const size_t off = shape.size() - sizes.size();
    for (size_t k = sizes.size(); k-- > 0;) {
      const int64_t c = sizes[k] == 1 ? 0 : coord[off + k];
      flat += c * mult;
      mult *= sizes[k];
    }
    return data[flat];
  }
  double operand(const Arg& a, const std::vector<int64_t>& shape, int64_t e) {
    return a.kind == Arg::Kind::kTensor ? at(static_cast<int32_t>(a.i), shape, e) : a.scalar();
  }

  void eval(const Node& n) {
    if (n.op == kCopyInto) return;
    const int32_t out = n.outputs[0];
    const Layout& l = g_.value(out).layout;
    const int64_t numel = l.numel();
    std::vector<double> r(static_cast<size_t>(numel));
    if (n.op == "aten::sum.dim_IntList" || n.op == "aten::mean.dim" || n.op == "aten::amax.default") {
      const int32_t in = static_cast<int32_t>(n.args[0].i);
      const auto& shape = g_.value(in).layout.sizes;
      const int64_t inner = shape.back();
      for (int64_t row = 0; row < numel; ++row) {
        double acc = n.op == "aten::amax.default" ? -INFINITY : 0;
        for (int64_t k = 0; k < inner; ++k) {
          const double x = at(in, shape, row * inner + k);
          acc = n.op == "aten::amax.default" ? std::max(acc, x) : acc + x;
        }
        if (n.op == "aten::mean.dim") acc /= static_cast<double>(inner);
        r[row] = round_to(l.dtype, acc);
      }
      vals_[out] = r;
      return;
    }
    for (int64_t e = 0; e < numel; ++e) {
      auto x = [&](size_t i) { return operand(n.args[i], l.sizes, e); };
      double v;
      if (n.op == "aten::add.Tensor") v = x(0) + x(2) * x(1);
      else if (n.op == "aten::sub.Tensor") v = x(0) - x(2) * x(1);
      else if (n.op == "aten::mul.Tensor") v = x(0) * x(1);
      else if (n.op == "aten::div.Tensor") v = x(0) / x(1);
      else if (n.op == "prims::fma.default") v = x(0) * x(1) + x(2);
      else if (n.op == "aten::exp.default") v = std::exp(x(0));
      else if (n.op == "aten::pow.Tensor_Scalar") v = std::pow(x(0), x(1));
      else if (n.op == "aten::rsqrt.default") v = 1 / std::sqrt(x(0));
      else if (n.op == "aten::full.default") v = x(1);
      else if (n.op == "aten::neg.default") v = -x(0);
      else if (n.op == "aten::relu.default") v = x(0) > 0 ? x(0) : 0;
      else if (n.op == "aten::sigmoid.default") v = 1 / (1 + std::exp(-x(0)));
      else if (n.op == "aten::tanh.default") v = std::tanh(x(0));
      else if (n.op == "aten::gt.Tensor" || n.op == "aten::gt.Scalar") v = x(0) > x(1);
      else if (n.op == "aten::where.self") v = x(0) != 0 ? x(1) : x(2);
      else if (n.op == "aten::_to_copy.default" || n.op == "aten::clone.default") v = x(0);
      else if (n.op == "aten::copy.default") v = x(1);
      else if (n.op == "aten::bitwise_not.default") v = x(0) == 0;
      else if (n.op == "aten::gelu_backward.default") {
        const double xv = x(1);
        v = x(0) * (0.5 * (1 + std::erf(xv / std::sqrt(2.0))) + xv * std::exp(-0.5 * xv * xv) / std::sqrt(2 * M_PI));
      }
      else throw std::runtime_error("reference: no op " + n.op);
      r[e] = round_to(l.dtype, v);
    }
    vals_[out] = r;
  }

  const Graph& g_;
  std::map<int32_t, std::vector<double>> vals_;
  std::map<int32_t, const void*> mem_;
};

}  // namespace nc_test
