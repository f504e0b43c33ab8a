// Names of status codes, dtypes and ops (used in every error message).
#include "neuroncoll/status.hpp"
#include "neuroncoll/types.hpp"

namespace neuroncoll {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kMismatch: return "mismatch";
    case Code::kTimeout: return "timeout";
    case Code::kPeerError: return "peer error";
    case Code::kUnsupported: return "unsupported";
    case Code::kSystemError: return "system error";
    case Code::kAborted: return "aborted";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(code_name(code_)) + ": " + message_;
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "SUM";
    case ReduceOp::kAvg: return "AVG";
    case ReduceOp::kProduct: return "PRODUCT";
    case ReduceOp::kMin: return "MIN";
    case ReduceOp::kMax: return "MAX";
    case ReduceOp::kPremulSum: return "PREMUL_SUM";
    case ReduceOp::kBitwiseAnd: return "BAND";
    case ReduceOp::kBitwiseOr: return "BOR";
    case ReduceOp::kBitwiseXor: return "BXOR";
  }
  return "unknown";
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

bool op_supported(DType dtype, ReduceOp op) {
  if (static_cast<int>(dtype) >= kNumDTypes || static_cast<int>(op) >= kNumReduceOps) return false;
  switch (op) {
    case ReduceOp::kBitwiseAnd:
    case ReduceOp::kBitwiseOr:
    case ReduceOp::kBitwiseXor: return !is_floating(dtype);
    case ReduceOp::kPremulSum: return is_floating(dtype);
    case ReduceOp::kAvg: return dtype != DType::kBool;
    default: return true;
  }
}

}  // namespace neuroncoll
