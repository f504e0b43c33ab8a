#include "csrc/distributed/CollectiveTypes.h"

#include <c10/util/Exception.h>

#include "csrc/aten/Launch.h"

namespace torchneuron {

neuroncoll::DType coll_dtype(c10::ScalarType type, const char* op) {
  using neuroncoll::DType;
  switch (type) {
    case c10::kFloat: return DType::kFloat32;
    case c10::kDouble: return DType::kFloat64;
    case c10::kHalf: return DType::kFloat16;
    case c10::kBFloat16: return DType::kBFloat16;
    case c10::kChar: return DType::kInt8;
    case c10::kShort: return DType::kInt16;
    case c10::kInt: return DType::kInt32;
    case c10::kLong: return DType::kInt64;
    case c10::kByte: return DType::kUInt8;
    case c10::kBool: return DType::kBool;
    default:
      TORCH_CHECK(false, "ProcessGroupNeuron ", op, ": dtype ", type,
                  " is not supported (float32/64, float16, bfloat16, int8/16/32/64, uint8, bool; "
                  "complex tensors only with SUM, AVG and PREMUL_SUM)");
  }
}

neuroncoll::ReduceOp coll_reduce_op(const c10d::ReduceOp& op, const char* collective) {
  using neuroncoll::ReduceOp;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return ReduceOp::kSum;
    case c10d::ReduceOp::AVG: return ReduceOp::kAvg;
    case c10d::ReduceOp::PRODUCT: return ReduceOp::kProduct;
    case c10d::ReduceOp::MIN: return ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return ReduceOp::kMax;
    case c10d::ReduceOp::BAND: return ReduceOp::kBitwiseAnd;
    case c10d::ReduceOp::BOR: return ReduceOp::kBitwiseOr;
    case c10d::ReduceOp::BXOR: return ReduceOp::kBitwiseXor;
    case c10d::ReduceOp::PREMUL_SUM: return ReduceOp::kPremulSum;
    default:
      TORCH_CHECK(false, "ProcessGroupNeuron ", collective, ": reduce op ",
                  static_cast<int>(op.op_), " is not supported");
  }
}

PremulFactor::PremulFactor(const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return;
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "ProcessGroupNeuron: PREMUL_SUM without its factor");
  if (!s->tensor_factor.defined()) {
    value_ = s->double_factor;
  } else if (s->tensor_factor.is_cpu()) {
    value_ = s->tensor_factor.item<double>();
  } else {
    alias_ = cpu_alias(s->tensor_factor);
  }
}

double PremulFactor::value() const { return alias_.defined() ? alias_.item<double>() : value_; }

void check_status(const neuroncoll::Status& status) {
  if (status.ok()) return;
  C10_THROW_ERROR(DistBackendError, "[neuron] " + status.to_string());
}

}  // namespace torchneuron
