#include "csrc/aten/native/OutDtypeProducts.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/mm.h>

namespace torchneuron::native {
namespace {

// The operands' dtype and out_dtype as CUDA accepts them.
void check_dtypes(const char* op, const at::Tensor& a, const at::Tensor& b, at::ScalarType out_dtype) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "[neuron] ", op, ": input dtypes must be the same, got ",
              a.scalar_type(), " and ", b.scalar_type());
  const bool half = a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf;
  TORCH_CHECK(out_dtype == a.scalar_type() || (out_dtype == at::kFloat && half), "[neuron] ", op,
              ": out_dtype must be the same as input dtype or fp32 for fp16/bf16 inputs, got out_dtype ",
              out_dtype, " for ", a.scalar_type(), " inputs");
}

// The bias of addmm / baddbmm: of out_dtype or of the operands' dtype.
void check_bias(const char* op, const at::Tensor& self, const at::Tensor& mat1, at::ScalarType out_dtype) {
  TORCH_CHECK(self.scalar_type() == out_dtype || self.scalar_type() == mat1.scalar_type(), "[neuron] ", op,
              ": self dtype must match either out_dtype or mat1 dtype, got ", self.scalar_type(), " (out_dtype ",
              out_dtype, ", mat1 ", mat1.scalar_type(), ")");
}

void check_out(const char* op, const at::Tensor& out, at::ScalarType out_dtype) {
  TORCH_CHECK(out.scalar_type() == out_dtype, "[neuron] ", op,
              ": out_dtype must be the same as the dtype of the provided out tensor, got out_dtype ", out_dtype,
              " and out ", out.scalar_type());
}

// An operand in the dtype the product runs in.
at::Tensor as(const at::Tensor& t, at::ScalarType dtype) { return t.scalar_type() == dtype ? t : t.to(dtype); }

at::Tensor& into(at::Tensor& out, const at::Tensor& result) {
  out.resize_(result.sizes());
  out.copy_(result);
  return out;
}

}  // namespace

at::Tensor mm_dtype(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype) {
  check_dtypes("aten::mm.dtype", self, mat2, out_dtype);
  return at::mm(as(self, out_dtype), as(mat2, out_dtype));
}

at::Tensor& mm_dtype_out(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype, at::Tensor& out) {
  check_out("aten::mm.dtype_out", out, out_dtype);
  return into(out, mm_dtype(self, mat2, out_dtype));
}

at::Tensor addmm_dtype(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                       at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha) {
  check_dtypes("aten::addmm.dtype", mat1, mat2, out_dtype);
  check_bias("aten::addmm.dtype", self, mat1, out_dtype);
  return at::addmm(as(self, out_dtype), as(mat1, out_dtype), as(mat2, out_dtype), beta, alpha);
}

at::Tensor& addmm_dtype_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                            at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha,
                            at::Tensor& out) {
  check_out("aten::addmm.dtype_out", out, out_dtype);
  return into(out, addmm_dtype(self, mat1, mat2, out_dtype, beta, alpha));
}

at::Tensor bmm_dtype(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype) {
  check_dtypes("aten::bmm.dtype", self, mat2, out_dtype);
  return at::bmm(as(self, out_dtype), as(mat2, out_dtype));
}

at::Tensor& bmm_dtype_out(const at::Tensor& self, const at::Tensor& mat2, at::ScalarType out_dtype, at::Tensor& out) {
  check_out("aten::bmm.dtype_out", out, out_dtype);
  return into(out, bmm_dtype(self, mat2, out_dtype));
}

at::Tensor baddbmm_dtype(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                         at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha) {
  check_dtypes("aten::baddbmm.dtype", batch1, batch2, out_dtype);
  check_bias("aten::baddbmm.dtype", self, batch1, out_dtype);
  return at::baddbmm(as(self, out_dtype), as(batch1, out_dtype), as(batch2, out_dtype), beta, alpha);
}

at::Tensor& baddbmm_dtype_out(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                              at::ScalarType out_dtype, const at::Scalar& beta, const at::Scalar& alpha,
                              at::Tensor& out) {
  check_out("aten::baddbmm.dtype_out", out, out_dtype);
  return into(out, baddbmm_dtype(self, batch1, batch2, out_dtype, beta, alpha));
}

}  // namespace torchneuron::native
