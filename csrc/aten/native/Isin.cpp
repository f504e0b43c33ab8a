#include "csrc/aten/native/Isin.h"

#include <algorithm>
#include <array>

#include <ATen/Dispatch.h>
#include <c10/util/strides.h>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/aten/native/KernelSupport.h"

namespace torchneuron::native {
namespace {

// Up to this many test values are compared with each element (ATen's CPU
// kernel does the same below a size that grows with the elements; above it,
// it sorts, and so does the fallback).
constexpr int64_t kMaxTestValues = 16;

template <typename T>
void isin_range(const T* elements, const T* tests, int64_t n_tests, bool invert, bool* out, int64_t begin,
                int64_t end) {
  std::array<T, kMaxTestValues> t{};
  std::copy(tests, tests + n_tests, t.begin());
  for (int64_t i = begin; i < end; ++i) {
    bool found = false;
    for (int64_t j = 0; j < n_tests; ++j) found |= elements[i] == t[j];  // NaN equals nothing
    out[i] = found != invert;
  }
}

}  // namespace

at::Tensor isin(const at::Tensor& elements, const at::Tensor& test_elements, bool assume_unique, bool invert) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::isin", "Tensor_Tensor");
  static OpCounter& counter = op_counter("aten::isin.Tensor_Tensor");
  const bool direct = elements.device().is_privateuseone() && elements.device() == test_elements.device() &&
                      elements.scalar_type() == test_elements.scalar_type() &&
                      // (ATen refuses bool and complex: the fallback raises its error)
                      !at::isComplexType(elements.scalar_type()) && elements.scalar_type() != at::kBool &&
                      elements.is_contiguous() &&
                      test_elements.is_contiguous() && test_elements.numel() <= kMaxTestValues;
  if (!direct) return call_fallback(handle, elements, test_elements, assume_unique, invert).back().toTensor();
  at::Tensor out = empty_dense(elements.device().index(), elements.sizes(), c10::contiguous_strides(elements.sizes()),
                               caffe2::TypeMeta::Make<bool>());
  counter.count(ExecPath::kKernel);
  if (elements.numel() == 0) return out;
  launch_cpu_kernels(out.device().index(), "aten::isin.Tensor_Tensor", elements.numel(), /*matrix=*/false,
                     [o = queued_alias(out), e = queued_alias(elements), t = queued_alias(test_elements), invert]() {
                       AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, e.scalar_type(), "isin", [&] {
                         const auto* ev = e.const_data_ptr<scalar_t>();
                         const auto* tv = t.const_data_ptr<scalar_t>();
                         auto* ov = o.mutable_data_ptr<bool>();
                         const int64_t n = e.numel(), n_tests = t.numel();
                         auto range = [&](int64_t begin, int64_t end) {
                           isin_range(ev, tv, n_tests, invert, ov, begin, end);
                         };
                         kernel_parallel_for(n)(n, range);
                       });
                     });
  return out;
}

}  // namespace torchneuron::native
