#include "csrc/aten/native/Select.h"

#include <array>
#include <cstring>
#include <vector>

#include <ATen/ExpandUtils.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/SmallVector.h>
#include <c10/util/strides.h>

#include "csrc/aten/Fallback.h"
#include "csrc/aten/Launch.h"
#include "csrc/aten/OpStats.h"
#include "csrc/aten/native/Factory.h"
#include "csrc/aten/native/KernelSupport.h"

namespace torchneuron::native {
namespace {

using Dims = c10::SmallVector<int64_t, 6>;

// How the kernel walks its operands: the output's sizes (innermost last,
// adjacent dimensions every operand walks as one merged) and each operand's
// strides in elements over them (0 where it broadcasts).
struct Walk {
  enum Operand { kOut, kCondition, kA, kB, kCount };
  Dims sizes;
  std::array<Dims, kCount> strides;
};

// t's strides over `sizes` (its dimensions aligned to the right, as
// broadcasting aligns them): 0 where t has size 1 or lacks the dimension.
Dims broadcast_strides(const at::Tensor& t, c10::IntArrayRef sizes) {
  Dims s(sizes.size(), 0);
  const int64_t offset = static_cast<int64_t>(sizes.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) s[offset + d] = t.size(d) == 1 ? 0 : t.stride(d);
  return s;
}

// Drops dimensions of size 1 and merges d with d + 1 where every operand
// steps over both as over one (stride[d] == stride[d + 1] * size[d + 1]), so
// that the innermost loop is as long as the layouts allow.
void coalesce(Walk& w) {
  Walk out;
  for (size_t d = 0; d < w.sizes.size(); ++d) {
    if (w.sizes[d] == 1) continue;
    bool merges = !out.sizes.empty();
    for (int o = 0; o < Walk::kCount && merges; ++o) {
      merges = out.strides[o].back() == w.strides[o][d] * w.sizes[d];
    }
    if (merges) {
      out.sizes.back() *= w.sizes[d];
      for (int o = 0; o < Walk::kCount; ++o) out.strides[o].back() = w.strides[o][d];
    } else {
      out.sizes.push_back(w.sizes[d]);
      for (int o = 0; o < Walk::kCount; ++o) out.strides[o].push_back(w.strides[o][d]);
    }
  }
  if (out.sizes.empty()) {  // a single element
    out.sizes.push_back(1);
    for (int o = 0; o < Walk::kCount; ++o) out.strides[o].push_back(0);
  }
  w = std::move(out);
}

// One run of n elements along the innermost dimension, with the operands'
// innermost strides fixed at compile time where they are 0 or 1 (so GCC
// vectorizes the common cases) and given otherwise.
template <typename T, int kC, int kA, int kB>
void select_run(T* out, const bool* c, const T* a, const T* b, int64_t n, int64_t cs, int64_t as, int64_t bs) {
  if constexpr (kC >= 0) cs = kC;
  if constexpr (kA >= 0) as = kA;
  if constexpr (kB >= 0) bs = kB;
  for (int64_t i = 0; i < n; ++i) out[i] = c[i * cs] ? a[i * as] : b[i * bs];
}

template <typename T>
using RunFn = void (*)(T*, const bool*, const T*, const T*, int64_t, int64_t, int64_t, int64_t);

template <typename T, int kC, int kA>
RunFn<T> pick_b(int64_t bs) {
  if (bs == 0) return select_run<T, kC, kA, 0>;
  if (bs == 1) return select_run<T, kC, kA, 1>;
  return select_run<T, kC, kA, -1>;
}
template <typename T, int kC>
RunFn<T> pick_a(int64_t as, int64_t bs) {
  if (as == 0) return pick_b<T, kC, 0>(bs);
  if (as == 1) return pick_b<T, kC, 1>(bs);
  return pick_b<T, kC, -1>(bs);
}
template <typename T>
RunFn<T> pick_run(int64_t cs, int64_t as, int64_t bs) {
  if (cs == 0) return pick_a<T, 0>(as, bs);
  if (cs == 1) return pick_a<T, 1>(as, bs);
  return pick_a<T, -1>(as, bs);
}

// out[e] = condition[e] ? a[e] : b[e] for the elements e in [begin, end) of
// the output, in its (row-major) order; T is an unsigned integer of the
// element's size: selection copies bits.
template <typename T>
void select_range(const Walk& w, char* out, const char* cond, const char* a, const char* b, int64_t begin,
                  int64_t end) {
  const size_t nd = w.sizes.size(), last = nd - 1;
  const int64_t inner = w.sizes[last];
  const RunFn<T> run = pick_run<T>(w.strides[Walk::kCondition][last], w.strides[Walk::kA][last],
                                   w.strides[Walk::kB][last]);
  std::vector<int64_t> idx(nd, 0);  // (a SmallVector here draws a false GCC 12 warning)
  for (int64_t rest = begin, d = static_cast<int64_t>(last); d >= 0; --d) {
    idx[d] = rest % w.sizes[d];
    rest /= w.sizes[d];
  }
  for (int64_t e = begin; e < end;) {
    std::array<int64_t, Walk::kCount> at{};
    for (size_t d = 0; d < nd; ++d) {
      for (int o = 0; o < Walk::kCount; ++o) at[o] += idx[d] * w.strides[o][d];
    }
    const int64_t n = std::min(inner - idx[last], end - e);
    run(reinterpret_cast<T*>(out) + at[Walk::kOut], reinterpret_cast<const bool*>(cond) + at[Walk::kCondition],
        reinterpret_cast<const T*>(a) + at[Walk::kA], reinterpret_cast<const T*>(b) + at[Walk::kB], n,
        w.strides[Walk::kCondition][last], w.strides[Walk::kA][last], w.strides[Walk::kB][last]);
    e += n;
    idx[last] += n;
    for (size_t d = last; d > 0 && idx[d] == w.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

void select(const Walk& w, size_t element_size, char* out, const char* cond, const char* a, const char* b,
            int64_t numel) {
  auto range = [&](int64_t begin, int64_t end) {
    switch (element_size) {
      case 1: return select_range<uint8_t>(w, out, cond, a, b, begin, end);
      case 2: return select_range<uint16_t>(w, out, cond, a, b, begin, end);
      case 4: return select_range<uint32_t>(w, out, cond, a, b, begin, end);
      default: return select_range<uint64_t>(w, out, cond, a, b, begin, end);
    }
  };
  if (numel < kMinParallelWork) return range(0, numel);  // one thread (KernelSupport.h)
  constexpr int64_t kGrain = 1 << 14;  // elements per unit the threads share
  const int64_t units = (numel + kGrain - 1) / kGrain;
  device_parallel_for(units, [&](int64_t u0, int64_t u1) { range(u0 * kGrain, std::min(u1 * kGrain, numel)); });
}

bool same_neuron_device(const at::Tensor& a, const at::Tensor& b) {
  return a.device().is_privateuseone() && a.device() == b.device();
}

// Element types selection copies (complex values are 16 bytes).
bool selectable(c10::ScalarType t) { return c10::elementSize(t) <= 8 && !at::isComplexType(t); }

// A full-size operand must be contiguous, as the output is (ATen then gives
// a contiguous output too); smaller ones broadcast and may have any strides.
bool layout_fits(const at::Tensor& t, c10::IntArrayRef sizes, int64_t numel) {
  return numel == 0 || t.numel() < numel || (t.sizes() == sizes && t.is_contiguous());
}

Walk walk_of(c10::IntArrayRef sizes, const at::Tensor& out, const at::Tensor& cond, const at::Tensor& a,
             const at::Tensor& b) {
  Walk w;
  w.sizes.assign(sizes.begin(), sizes.end());
  w.strides[Walk::kOut] = broadcast_strides(out, sizes);
  w.strides[Walk::kCondition] = broadcast_strides(cond, sizes);
  w.strides[Walk::kA] = broadcast_strides(a, sizes);
  w.strides[Walk::kB] = broadcast_strides(b, sizes);
  coalesce(w);
  return w;
}

}  // namespace

at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  static const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::where", "self");
  static OpCounter& counter = op_counter("aten::where.self");
  const bool direct = condition.scalar_type() == at::kBool && same_neuron_device(self, condition) &&
                      same_neuron_device(other, condition) && self.scalar_type() == other.scalar_type() &&
                      selectable(self.scalar_type());
  const at::DimVector sizes = direct ? at::infer_size_dimvector(at::infer_size_dimvector(condition.sizes(), self.sizes()),
                                                                other.sizes())
                                     : at::DimVector();
  const int64_t numel = c10::multiply_integers(sizes);
  if (!direct || !layout_fits(condition, sizes, numel) || !layout_fits(self, sizes, numel) ||
      !layout_fits(other, sizes, numel)) {
    return call_fallback(handle, condition, self, other).back().toTensor();
  }
  at::Tensor out = empty_dense(self.device().index(), sizes, c10::contiguous_strides(sizes), self.dtype());
  counter.count(ExecPath::kKernel);
  if (numel == 0) return out;
  launch_cpu_kernels(out.device().index(), "aten::where.self", numel, /*matrix=*/false,
                     [o = queued_alias(out), c = queued_alias(condition), a = queued_alias(self),
                      b = queued_alias(other), w = walk_of(sizes, out, condition, self, other), numel]() {
                       select(w, o.element_size(), static_cast<char*>(o.data_ptr()),
                              static_cast<const char*>(c.data_ptr()), static_cast<const char*>(a.data_ptr()),
                              static_cast<const char*>(b.data_ptr()), numel);
                     });
  return out;
}

at::Tensor& masked_fill_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  static const c10::OperatorHandle handle =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::masked_fill_", "Scalar");
  static OpCounter& counter = op_counter("aten::masked_fill_.Scalar");
  // The mask must broadcast to self (ATen's error otherwise comes from the
  // fallback) and must not share self's memory.
  const bool direct = mask.scalar_type() == at::kBool && same_neuron_device(self, mask) &&
                      selectable(self.scalar_type()) && self.is_contiguous() &&
                      !mask.storage().is_alias_of(self.storage()) && mask.dim() <= self.dim() &&
                      at::is_expandable_to(mask.sizes(), self.sizes()) && layout_fits(mask, self.sizes(), self.numel());
  if (!direct) {
    call_fallback(handle, self, mask, value);
    return self;
  }
  counter.count(ExecPath::kKernel);
  if (self.numel() == 0) return self;
  // The value in self's type, converted (and range-checked) here, as ATen does.
  const at::Tensor fill = at::scalar_tensor(value, self.options().device(at::kCPU));
  std::array<char, 8> bits{};
  std::memcpy(bits.data(), fill.data_ptr(), fill.element_size());
  launch_cpu_kernels(self.device().index(), "aten::masked_fill_.Scalar", self.numel(), /*matrix=*/false,
                     [s = queued_alias(self), m = queued_alias(mask), bits,
                      w = walk_of(self.sizes(), self, mask, fill, self)]() {
                       select(w, s.element_size(), static_cast<char*>(s.data_ptr()),
                              static_cast<const char*>(m.data_ptr()), bits.data(),
                              static_cast<const char*>(s.data_ptr()), s.numel());
                     });
  return self;
}

}  // namespace torchneuron::native
