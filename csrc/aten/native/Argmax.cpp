#include "csrc/aten/native/Argmax.h"

#include <vector>

#include <c10/core/WrapDimMinimal.h>
#include <c10/util/strides.h>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/aten/native/KernelSupport.h"
#include "neuronkernels/argmax.hpp"

namespace torchneuron::native {

namespace nk = neuronkernels;

at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim) {
  static const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::argmax", "");
  static OpCounter& counter = op_counter("aten::argmax");
  const int64_t last = self.dim() - 1;
  const auto dtype = kernel_dtype(self.scalar_type());
  const bool direct = self.device().is_privateuseone() && dtype && self.dim() >= 1 && dim.has_value() &&
                      c10::maybe_wrap_dim(*dim, self.dim()) == last && self.size(last) > 0 && self.is_contiguous();
  // (An empty row, another dimension, dim=None: ATen's kernel and messages.)
  if (!direct) return call_fallback(handle, self, dim, keepdim).back().toTensor();
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  if (keepdim) {
    sizes.back() = 1;
  } else {
    sizes.pop_back();
  }
  at::Tensor out = empty_dense(self.device().index(), sizes, c10::contiguous_strides(sizes),
                               caffe2::TypeMeta::Make<int64_t>());
  counter.count(ExecPath::kKernel);
  nk::ArgmaxParams p;
  p.dtype = *dtype;
  p.cols = self.size(last);
  p.rows = self.numel() / p.cols;
  p.row_stride = p.cols;
  if (p.rows == 0) return out;
  launch(out.device().index(), "aten::argmax",
         [p, keep = storages_to_keep({&self, &out}), x = self.const_data_ptr(),
          o = out.mutable_data_ptr<int64_t>()]() mutable {
           p.x = x;
           p.out = o;
           nk::argmax_rows(p, kernel_parallel_for(p.rows * p.cols));  // (one row runs on one thread)
         });
  return out;
}

}  // namespace torchneuron::native
