// Direct neuron registrations: one line per op. Everything not listed here
// goes through the boxed fallback (Fallback.cpp).
#include <torch/library.h>

#include "csrc/aten/native/Argmax.h"
#include "csrc/aten/native/Attention.h"
#include "csrc/aten/native/Compat.h"
#include "csrc/aten/native/Convolution.h"
#include "csrc/aten/native/Copy.h"
#include "csrc/aten/native/Elementwise.h"
#include "csrc/aten/native/Isin.h"
#include "csrc/aten/native/Select.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/aten/native/Matmul.h"
#include "csrc/aten/native/OutDtypeProducts.h"
#include "csrc/aten/native/Random.h"
#include "csrc/aten/native/RecurrentCells.h"
#include "csrc/aten/native/RecurrentLayers.h"
#include "csrc/aten/native/Streams.h"
#include "csrc/aten/native/Views.h"

namespace torchneuron {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // allocation and storage
  m.impl("empty.memory_format", TORCH_FN(native::empty_memory_format));
  m.impl("empty_strided", TORCH_FN(native::empty_strided));
  m.impl("resize_", TORCH_FN(native::resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(native::set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(native::set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(native::set_source_tensor));
  m.impl("set_", TORCH_FN(native::set_empty));
  // copies and scalars
  m.impl("_copy_from", TORCH_FN(native::_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(native::_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(native::_local_scalar_dense));
  // views
  m.impl("view", TORCH_FN(native::view));
  m.impl("as_strided", TORCH_FN(native::as_strided));
  m.impl("_reshape_alias", TORCH_FN(native::_reshape_alias));
  m.impl("unfold", TORCH_FN(native::unfold));
  m.impl("view_as_real", TORCH_FN(native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(native::view_as_complex));
  // hot elementwise ops (general cases go on to the fallback)
  m.impl("add.Tensor", TORCH_FN(native::add));
  m.impl("sub.Tensor", TORCH_FN(native::sub));
  m.impl("mul.Tensor", TORCH_FN(native::mul));
  m.impl("div.Tensor", TORCH_FN(native::div));
  m.impl("add_.Tensor", TORCH_FN(native::add_));
  m.impl("mul_.Tensor", TORCH_FN(native::mul_));
  // elementwise selection (general cases go on to the fallback)
  m.impl("where.self", TORCH_FN(native::where));
  m.impl("masked_fill_.Scalar", TORCH_FN(native::masked_fill_));
  // the last dimension's argmax: greedy decoding's next tokens (the rest go to the fallback)
  m.impl("argmax", TORCH_FN(native::argmax));
  // membership in a few values: stopping criteria's end-of-sequence ids (the rest go to the fallback)
  m.impl("isin.Tensor_Tensor", TORCH_FN(native::isin));
  // matrix products with few rows, and float32 ones through oneDNN (general cases go on to the fallback)
  m.impl("mm", TORCH_FN(native::mm));
  m.impl("addmm", TORCH_FN(native::addmm));
  // float32 products oneDNN takes (native/OneDnnGemm.h) in their out= and in-place forms
  m.impl("mm.out", TORCH_FN(native::mm_out));
  m.impl("addmm.out", TORCH_FN(native::addmm_out));
  m.impl("addmm_", TORCH_FN(native::addmm_));
  // products with an out_dtype (float32 from 16-bit operands; ATen has no CPU kernel for them)
  m.impl("mm.dtype", TORCH_FN(native::mm_dtype));
  m.impl("mm.dtype_out", TORCH_FN(native::mm_dtype_out));
  m.impl("addmm.dtype", TORCH_FN(native::addmm_dtype));
  m.impl("addmm.dtype_out", TORCH_FN(native::addmm_dtype_out));
  m.impl("bmm.dtype", TORCH_FN(native::bmm_dtype));
  m.impl("bmm.dtype_out", TORCH_FN(native::bmm_dtype_out));
  m.impl("baddbmm.dtype", TORCH_FN(native::baddbmm_dtype));
  m.impl("baddbmm.dtype_out", TORCH_FN(native::baddbmm_dtype_out));
  m.impl("bmm", TORCH_FN(native::bmm));
  m.impl("baddbmm", TORCH_FN(native::baddbmm));
  // convolutions (PyTorch routes out-of-tree devices to the overrideable ops)
  m.impl("convolution_overrideable", TORCH_FN(native::convolution_overrideable));
  m.impl("convolution_backward_overrideable", TORCH_FN(native::convolution_backward_overrideable));
  // attention (scaled_dot_product_attention picks it via _fused_sdp_choice)
  m.impl("_fused_sdp_choice", TORCH_FN(native::fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(native::sdpa_overrideable));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(native::sdpa_overrideable_backward));
  // recurrent cells (nn.LSTM / nn.GRU and their cells)
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(native::thnn_fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(native::thnn_fused_lstm_cell_backward_impl));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(native::thnn_fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(native::thnn_fused_gru_cell_backward));
  // streams
  m.impl("record_stream", TORCH_FN(native::record_stream));
  // generic behaviour that is wrong for neuron
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(native::_has_compatible_shallow_copy_type));
  m.impl("histc", TORCH_FN(native::histc));
  m.impl("embedding_dense_backward", TORCH_FN(native::embedding_dense_backward));
  // random ops whose CPU kernels would use the CPU generator
  m.impl("native_dropout", TORCH_FN(native::native_dropout));
}

}  // namespace torchneuron

// Whole recurrent layers as autograd nodes of their own (RecurrentLayers.h),
// in place of PyTorch's per-step composite.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(torchneuron::native::lstm_input));
  m.impl("lstm.data", TORCH_FN(torchneuron::native::lstm_data));
  m.impl("gru.input", TORCH_FN(torchneuron::native::gru_input));
  m.impl("gru.data", TORCH_FN(torchneuron::native::gru_data));
}

// A copy from a conjugate or negative view must reach _copy_from with the
// view as it is (the CPU aliases carry the bits; the CPU copy resolves
// them): without these fallthroughs the Conjugate/Negative fallbacks would
// materialize through clone -> copy_ -> _copy_from, forever.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
