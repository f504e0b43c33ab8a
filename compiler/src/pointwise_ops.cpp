#include "neuroncompiler/pointwise_ops.hpp"

#include <string_view>
#include <unordered_map>

namespace neuroncompiler {
namespace {

enum class Form : uint8_t {
  kUnary,        // op(self)
  kBinary,       // op(self, other)
  kAlpha,        // self op alpha * other (add, sub)
  kRsub,         // other - alpha * self
  kCompare,      // bool result of op(self, other)
  kLogical,      // bool result of op(self, other) on bool or float
  kLogicalNot,
  kCast,         // _to_copy, clone, copy_: the value, converted
  kWhere,        // where(cond, self, other)
  kGelu,         // gelu(self, approximate)
  kPowScalar,    // pow(self, exponent scalar)
  kSigmoidBackward, kTanhBackward, kSiluBackward, kThresholdBackward, kGeluBackward,
  kAddcmul, kAddcdiv,
  kFma,          // prims.fma(a, b, c) = a * b + c (Dynamo's addcdiv_), rounded twice as eager's addcdiv
  kFull,         // full(size, value): the value everywhere (a group with no loads)
};

struct Entry {
  Form form;
  TileOp op = TileOp::kAdd;
};

const std::unordered_map<std::string_view, Entry>& table() {
  static const std::unordered_map<std::string_view, Entry> kTable = {
      {"aten::neg.default", {Form::kUnary, TileOp::kNeg}},
      {"aten::abs.default", {Form::kUnary, TileOp::kAbs}},
      {"aten::exp.default", {Form::kUnary, TileOp::kExp}},
      {"aten::log.default", {Form::kUnary, TileOp::kLog}},
      {"aten::sqrt.default", {Form::kUnary, TileOp::kSqrt}},
      {"aten::rsqrt.default", {Form::kUnary, TileOp::kRsqrt}},
      {"aten::relu.default", {Form::kUnary, TileOp::kRelu}},
      {"aten::sigmoid.default", {Form::kUnary, TileOp::kSigmoid}},
      {"aten::tanh.default", {Form::kUnary, TileOp::kTanh}},
      {"aten::silu.default", {Form::kUnary, TileOp::kSilu}},
      {"aten::reciprocal.default", {Form::kUnary, TileOp::kReciprocal}},
      {"aten::sin.default", {Form::kUnary, TileOp::kSin}},
      {"aten::cos.default", {Form::kUnary, TileOp::kCos}},
      {"aten::erf.default", {Form::kUnary, TileOp::kErf}},
      {"aten::logical_not.default", {Form::kLogicalNot}},
      {"aten::bitwise_not.default", {Form::kLogicalNot}},  // bool inputs only (checked)
      {"aten::add.Tensor", {Form::kAlpha, TileOp::kAdd}},
      {"aten::add.Scalar", {Form::kAlpha, TileOp::kAdd}},
      {"aten::sub.Tensor", {Form::kAlpha, TileOp::kSub}},
      {"aten::sub.Scalar", {Form::kAlpha, TileOp::kSub}},
      {"aten::rsub.Tensor", {Form::kRsub}},
      {"aten::rsub.Scalar", {Form::kRsub}},
      {"aten::mul.Tensor", {Form::kBinary, TileOp::kMul}},
      {"aten::mul.Scalar", {Form::kBinary, TileOp::kMul}},
      {"aten::div.Tensor", {Form::kBinary, TileOp::kDiv}},
      {"aten::div.Scalar", {Form::kBinary, TileOp::kDiv}},
      {"aten::maximum.default", {Form::kBinary, TileOp::kMax}},
      {"aten::minimum.default", {Form::kBinary, TileOp::kMin}},
      {"aten::pow.Tensor_Tensor", {Form::kBinary, TileOp::kPow}},
      {"aten::pow.Tensor_Scalar", {Form::kPowScalar}},
      {"aten::eq.Tensor", {Form::kCompare, TileOp::kEq}}, {"aten::eq.Scalar", {Form::kCompare, TileOp::kEq}},
      {"aten::ne.Tensor", {Form::kCompare, TileOp::kNe}}, {"aten::ne.Scalar", {Form::kCompare, TileOp::kNe}},
      {"aten::lt.Tensor", {Form::kCompare, TileOp::kLt}}, {"aten::lt.Scalar", {Form::kCompare, TileOp::kLt}},
      {"aten::le.Tensor", {Form::kCompare, TileOp::kLe}}, {"aten::le.Scalar", {Form::kCompare, TileOp::kLe}},
      {"aten::gt.Tensor", {Form::kCompare, TileOp::kGt}}, {"aten::gt.Scalar", {Form::kCompare, TileOp::kGt}},
      {"aten::ge.Tensor", {Form::kCompare, TileOp::kGe}}, {"aten::ge.Scalar", {Form::kCompare, TileOp::kGe}},
      {"aten::logical_and.default", {Form::kLogical, TileOp::kLogicalAnd}},
      {"aten::logical_or.default", {Form::kLogical, TileOp::kLogicalOr}},
      {"aten::where.self", {Form::kWhere}},
      {"aten::gelu.default", {Form::kGelu}},
      {"aten::_to_copy.default", {Form::kCast}},
      {"aten::clone.default", {Form::kCast}},
      {"aten::copy.default", {Form::kCast}},  // functional copy: src converted to self's layout
      {kCopyInto, {Form::kCast}},
      {"aten::sigmoid_backward.default", {Form::kSigmoidBackward}},
      {"aten::tanh_backward.default", {Form::kTanhBackward}},
      {"aten::silu_backward.default", {Form::kSiluBackward}},
      {"aten::threshold_backward.default", {Form::kThresholdBackward}},
      {"aten::gelu_backward.default", {Form::kGeluBackward}},
      {"aten::addcmul.default", {Form::kAddcmul}},
      {"aten::addcdiv.default", {Form::kAddcdiv}},
      {"prims::fma.default", {Form::kFma}},
      {"aten::full.default", {Form::kFull}},
      {"aten::full_like.default", {Form::kFull}},  // its first argument gives only the shape: not read
  };
  return kTable;
}

const Entry* find(std::string_view op) {
  const auto& t = table();
  auto it = t.find(op);
  return it == t.end() ? nullptr : &it->second;
}

// How many leading arguments are operands (tensors or scalars).
int operand_count(Form f) {
  switch (f) {
    case Form::kUnary: case Form::kLogicalNot: case Form::kGelu: case Form::kFull: return 1;
    case Form::kCast: return 1;
    case Form::kWhere: case Form::kAddcmul: case Form::kAddcdiv: case Form::kThresholdBackward: case Form::kFma:
      return 3;
    default: return 2;
  }
}

bool is_bool_or_float(DType t) { return is_tile_float(t) || t == DType::kBool; }

}  // namespace

bool is_pointwise(const Graph& g, const Node& n) {
  const Entry* e = find(n.op);
  if (e == nullptr) return false;
  const bool copy_into = n.op == kCopyInto;
  if (copy_into ? !n.outputs.empty() : (n.outputs.size() != 1 || n.outputs[0] < 0)) return false;
  const Value& out = g.value(copy_into ? static_cast<int32_t>(n.args[0].i) : n.outputs[0]);
  if (!is_tile_storable(out.layout.dtype)) return false;
  // copy_ and copy read their source second; full's value follows its size
  // (full_like's its template tensor).
  const int first = copy_into || n.op == "aten::copy.default" || e->form == Form::kFull ? 1 : 0;
  if (n.op == "aten::bitwise_not.default" &&
      (n.args[0].kind != Arg::Kind::kTensor || g.value(static_cast<int32_t>(n.args[0].i)).layout.dtype != DType::kBool)) {
    return false;  // bitwise on integers is not a logical not
  }
  const int count = operand_count(e->form);
  if (static_cast<int>(n.args.size()) < first + count) return false;
  for (int i = first; i < first + count; ++i) {
    const Arg& a = n.args[i];
    if (a.kind == Arg::Kind::kTensor) {
      const DType t = g.value(static_cast<int32_t>(a.i)).layout.dtype;
      if (!is_tile_storable(t)) return false;
      const bool operand_ok = e->form == Form::kCast || (e->form == Form::kWhere && i == 0)
                                  ? true
                                  : (e->form == Form::kLogical || e->form == Form::kLogicalNot) ? is_bool_or_float(t)
                                                                                                 : is_tile_float(t);
      if (!operand_ok) return false;
    } else if (!a.is_scalar()) {
      return false;
    }
  }
  // Scalars after the operands (alpha, value, threshold, exponent) must be numbers.
  if ((e->form == Form::kAlpha || e->form == Form::kRsub) && n.args.size() > 2 && !n.args[2].is_scalar()) return false;
  if ((e->form == Form::kAddcmul || e->form == Form::kAddcdiv) && (n.args.size() < 4 || !n.args[3].is_scalar())) return false;
  if (e->form == Form::kGelu && n.args.size() > 1 && n.args[1].kind == Arg::Kind::kString &&
      n.args[1].s != "none" && n.args[1].s != "tanh") {
    return false;
  }
  if (e->form == Form::kGeluBackward && n.args.size() > 2 && n.args[2].kind == Arg::Kind::kString &&
      n.args[2].s != "none") {
    return false;  // the tanh approximation's backward stays an extern call
  }
  if (e->form == Form::kCast) {
    const Arg& src = n.args[first];
    if (src.kind != Arg::Kind::kTensor) return false;
    const DType from = g.value(static_cast<int32_t>(src.i)).layout.dtype;
    // Through float32 an integer keeps 24 bits: int-to-int casts are not ours.
    if (!is_bool_or_float(from) && !is_bool_or_float(out.layout.dtype) && from != out.layout.dtype) return false;
    if (!is_bool_or_float(from) && from == out.layout.dtype && from != DType::kInt8 && from != DType::kUInt8) {
      return false;  // an int32 or int64 copy through float32 would round values beyond 2^24
    }
    if (n.op == "aten::_to_copy.default" && n.args.size() > 2 && n.args[2].kind != Arg::Kind::kNone &&
        !(n.args[2].kind == Arg::Kind::kInt && n.args[2].i == 0)) {
      return false;  // a layout other than strided
    }
  }
  if (e->form != Form::kCompare && e->form != Form::kLogical && e->form != Form::kLogicalNot &&
      e->form != Form::kCast && !is_tile_float(out.layout.dtype)) {
    return false;
  }
  return true;
}

std::optional<LastDimReduction> as_last_dim_reduction(const Graph& g, const Node& n) {
  ReduceKind kind;
  if (n.op == "aten::sum.dim_IntList") kind = ReduceKind::kSum;
  else if (n.op == "aten::mean.dim") kind = ReduceKind::kMean;
  else if (n.op == "aten::amax.default") kind = ReduceKind::kMax;
  else return std::nullopt;
  if (n.outputs.size() != 1 || n.outputs[0] < 0 || n.args.size() < 3) return std::nullopt;
  if (n.args[0].kind != Arg::Kind::kTensor || n.args[1].kind != Arg::Kind::kIntList || n.args[1].ints.size() != 1) {
    return std::nullopt;
  }
  const Value& in = g.value(static_cast<int32_t>(n.args[0].i));
  const Value& out = g.value(n.outputs[0]);
  const int64_t rank = static_cast<int64_t>(in.layout.sizes.size());
  int64_t dim = n.args[1].ints[0];
  if (dim < 0) dim += rank;
  if (rank == 0 || dim != rank - 1) return std::nullopt;
  if (!is_tile_float(in.layout.dtype) || !is_tile_float(out.layout.dtype)) return std::nullopt;
  // dtype= converts the input first. The interpreter loads into float32 and
  // sums there, so float32 or the input's own type is what it does anyway
  // (TRL's LM head sums its float32 tiles with dtype=torch.float32).
  if (n.args.size() > 3 && n.args[3].kind != Arg::Kind::kNone) {
    const std::optional<DType> to =
        n.args[3].kind == Arg::Kind::kInt ? dtype_from_scalar_type(n.args[3].i) : std::nullopt;
    if (!to || (*to != DType::kFloat32 && *to != in.layout.dtype) || *to != out.layout.dtype) return std::nullopt;
  }
  const size_t out_rank = out.layout.sizes.size();
  if (out_rank != static_cast<size_t>(rank) && out_rank != static_cast<size_t>(rank - 1)) return std::nullopt;
  return LastDimReduction{kind, static_cast<int32_t>(n.args[0].i)};
}

int32_t emit_pointwise(const Graph&, const Node& n, const TileEmitter& emit) {
  const Entry* e = find(n.op);
  if (e == nullptr) throw CompileError("not a pointwise op: " + n.op);
  const auto& a = n.args;
  auto arg = [&](size_t i) { return emit.operand(a[i]); };
  auto scalar = [&](size_t i, float fallback) { return a.size() > i && a[i].is_scalar() ? static_cast<float>(a[i].scalar()) : fallback; };
  switch (e->form) {
    case Form::kUnary: return emit.op(e->op, arg(0), -1, -1);
    case Form::kLogicalNot: return emit.op(TileOp::kLogicalNot, arg(0), -1, -1);
    case Form::kBinary: case Form::kCompare: case Form::kLogical: return emit.op(e->op, arg(0), arg(1), -1);
    case Form::kAlpha: {
      const float alpha = scalar(2, 1.f);
      int32_t other = arg(1);
      if (alpha != 1.f) other = emit.op(TileOp::kMul, other, emit.constant(alpha), -1);
      return emit.op(e->op, arg(0), other, -1);
    }
    case Form::kRsub: {
      const float alpha = scalar(2, 1.f);
      int32_t self = arg(0);
      if (alpha != 1.f) self = emit.op(TileOp::kMul, self, emit.constant(alpha), -1);
      return emit.op(TileOp::kSub, arg(1), self, -1);
    }
    case Form::kCast: return arg(n.op == kCopyInto || n.op == "aten::copy.default" ? 1 : 0);
    case Form::kFull: return arg(1);
    case Form::kWhere: return emit.op(TileOp::kWhere, arg(1), arg(2), arg(0));
    case Form::kGelu: {
      const bool tanh = a.size() > 1 && a[1].kind == Arg::Kind::kString && a[1].s == "tanh";
      return emit.op(tanh ? TileOp::kGeluTanh : TileOp::kGelu, arg(0), -1, -1);
    }
    case Form::kPowScalar: {
      const float exponent = static_cast<float>(a[1].scalar());
      if (exponent == 2.f) {
        const int32_t x = arg(0);
        return emit.op(TileOp::kMul, x, x, -1);
      }
      if (exponent == 1.f) return arg(0);
      if (exponent == 0.5f) return emit.op(TileOp::kSqrt, arg(0), -1, -1);
      if (exponent == -1.f) return emit.op(TileOp::kReciprocal, arg(0), -1, -1);
      return emit.op(TileOp::kPow, arg(0), arg(1), -1);
    }
    case Form::kSigmoidBackward: {  // grad * y * (1 - y)
      const int32_t y = arg(1);
      const int32_t one_minus = emit.op(TileOp::kSub, emit.constant(1.f), y, -1);
      return emit.op(TileOp::kMul, emit.op(TileOp::kMul, arg(0), y, -1), one_minus, -1);
    }
    case Form::kTanhBackward: {  // grad * (1 - y^2)
      const int32_t y = arg(1);
      const int32_t one_minus = emit.op(TileOp::kSub, emit.constant(1.f), emit.op(TileOp::kMul, y, y, -1), -1);
      return emit.op(TileOp::kMul, arg(0), one_minus, -1);
    }
    case Form::kSiluBackward:  // grad * s * (1 + x * (1 - s)), s = sigmoid(x), one tile op
      return emit.op(TileOp::kSiluBackward, arg(0), arg(1), -1);
    case Form::kGeluBackward:  // grad * (Phi(x) + x * phi(x)), one tile op
      return emit.op(TileOp::kGeluBackward, arg(0), arg(1), -1);
    case Form::kThresholdBackward: {  // self <= threshold ? 0 : grad
      const int32_t below = emit.op(TileOp::kLe, arg(1), arg(2), -1);
      return emit.op(TileOp::kWhere, emit.constant(0.f), arg(0), below);
    }
    case Form::kFma: return emit.op(TileOp::kAdd, emit.op(TileOp::kMul, arg(0), arg(1), -1), arg(2), -1);
    case Form::kAddcmul: case Form::kAddcdiv: {  // self + value * (t1 op t2)
      const int32_t prod = emit.op(e->form == Form::kAddcmul ? TileOp::kMul : TileOp::kDiv, arg(1), arg(2), -1);
      const float value = scalar(3, 1.f);
      const int32_t scaled = value == 1.f ? prod : emit.op(TileOp::kMul, prod, emit.constant(value), -1);
      return emit.op(TileOp::kAdd, arg(0), scaled, -1);
    }
  }
  throw CompileError("unhandled pointwise form of " + n.op);
}

}  // namespace neuroncompiler
