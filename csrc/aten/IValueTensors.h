// Visiting and mapping the tensors inside boxed arguments (Tensor, Tensor[],
// Tensor?[]), keeping each IValue's kind.
#pragma once

#include <ATen/core/ivalue.h>

namespace torchneuron {

template <typename F>
void for_each_tensor(const c10::IValue& v, F&& f) {
  if (v.isTensor()) {
    f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) f(e.toTensor());
    }
  }
}

template <typename F>
c10::IValue map_tensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return c10::IValue(f(v.toTensor()));
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    out.reserve(v.toTensorList().size());
    for (const at::Tensor& t : v.toTensorList()) out.push_back(f(t));
    return c10::IValue(std::move(out));
  }
  if (v.isList()) {
    auto in = v.toList();
    bool any = false;
    for (const c10::IValue& e : in) any = any || e.isTensor();
    if (!any) return v;
    c10::impl::GenericList out(in.elementType());
    out.reserve(in.size());
    for (const c10::IValue& e : in) out.push_back(e.isTensor() ? c10::IValue(f(e.toTensor())) : e);
    return c10::IValue(std::move(out));
  }
  return v;
}

}  // namespace torchneuron
