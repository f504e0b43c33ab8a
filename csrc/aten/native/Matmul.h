// Matrix products with few rows (a decode step's linear layers) run the
// device's skinny-matmul kernel (neuronkernels/matmul.hpp), which streams the
// weights once at memory speed; every other mm/addmm goes on to the boxed
// fallback (ATen's CPU GEMM on the device buffers), as do errors, so their
// messages are ATen's.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

#include <neuronkernels/matmul.hpp>

namespace torchneuron::native {

// The skinny-matmul kernel's arguments for y = x . w (+ bias) when it takes
// these operands (2-D, one floating dtype on one neuron device, few rows,
// row-contiguous x, w contiguous along either dimension, bias broadcasting
// to the output), for a contiguous [M, N] y whose data is set by the caller;
// otherwise nothing.
std::optional<neuronkernels::SkinnyMatmulParams> skinny_matmul_params(const at::Tensor& x, const at::Tensor& w,
                                                                     const at::Tensor* bias);
// Whether the skinny-matmul kernel takes a product of `rows` rows of this
// type (the row range of the kernel, and not a product ATen computes
// faster: see skinny_matmul_params). A compiled program's extern matmul asks
// it to know which kernel will run.
bool skinny_matmul_takes_rows(c10::ScalarType type, int64_t rows);
// Runs the kernel on the calling thread (inside queued work: a compiled
// program's matmul), split over the device's threads when it pays.
void run_skinny_matmul_here(const neuronkernels::SkinnyMatmulParams& p);

// Whether `t` is a plain strided tensor of `dtype` on `like`'s device (not a
// lazily conjugated or negated view): what the products here take directly.
bool is_plain_on(const at::Tensor& t, const at::Tensor& like, at::ScalarType dtype);

// Y = [beta * C +] alpha * (A @ B) on CPU aliases, on the calling worker
// (run_onednn_here, UpcastGemm.h's upcast_addmm_here).
using ProductRunner = void (*)(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, const at::Tensor* C,
                               float beta, float alpha);
// Queues `run` for out = [beta * bias +] alpha * (a @ b) on the operands'
// device, `out` allocated and checked by the caller; bias (null when beta is
// 0, as ATen's addmm ignores it) may be `out` itself (addmm_). False, queuing
// nothing, when the bias shares only part of out's memory.
bool queue_product(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias, float beta,
                   float alpha, const at::Tensor& out, ProductRunner run);

// Whether a float32 product of these neuron tensors runs through oneDNN
// (OneDnnGemm.h): plain 2-D operands on one device, a bias (addmm's self)
// broadcasting to the output, a policy and size oneDNN is chosen for.
bool onednn_takes(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias);
// The same for batches of matrices ([B, M, K] @ [B, K, N], a bias
// broadcasting to [B, M, N]): bmm and baddbmm.
bool onednn_takes_batched(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias);
// Y = [beta * C +] alpha * (A @ B) on CPU aliases (C broadcast to Y), on the
// calling worker; Y as onednn_writes_into takes it.
void run_onednn_here(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, const at::Tensor* C, float beta,
                     float alpha);

at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2,
                 const at::Scalar& beta, const at::Scalar& alpha);
// The out= and in-place forms: float32 products oneDNN takes (onednn_takes)
// run there, into the given tensor when it is an [M, N] output oneDNN writes
// into (contiguous, or a tile of dense rows: onednn_writes_into);
// everything else goes on to the fallback.
at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out);
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out);
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha);

// Batched float32 products ([B, M, K] @ [B, K, N]) oneDNN takes (the policy
// and size of OneDnnGemm.h) run there; everything else goes on to the fallback.
at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor baddbmm(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                   const at::Scalar& beta, const at::Scalar& alpha);

}  // namespace torchneuron::native
