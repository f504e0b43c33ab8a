#include "neuroncompiler/native_ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "neuronkernels/attention.hpp"
#include "neuronkernels/norm.hpp"
#include "neuronkernels/rope.hpp"
#include "native_views.hpp"

namespace neuroncompiler {
namespace {

namespace nk = neuronkernels;

// Problems below this many multiply-adds run on the calling thread alone: the
// same threshold as the device's eager kernels (csrc/aten/native/KernelSupport.h).
constexpr int64_t kMinParallelWork = int64_t{1} << 16;

const nk::ParallelFor& threads_for(int64_t work, const nk::ParallelFor& parallel_for) {
  static const nk::ParallelFor serial = nk::serial_for;
  return work < kMinParallelWork ? serial : parallel_for;
}

struct Operands {
  const Program& p;
  const RunBuffers& b;
  const Node& n;

  int32_t arg_id(size_t i) const { return n.args.at(i).kind == Arg::Kind::kTensor ? static_cast<int32_t>(n.args[i].i) : -1; }
  int32_t out_id(size_t i) const { return i < n.outputs.size() ? n.outputs[i] : -1; }
  void* data(int32_t id) const { return id < 0 ? nullptr : value_data(p, b, id); }
  const Layout& layout(int32_t id) const { return p.values.at(static_cast<size_t>(id)).layout; }
  // A 4-D view of value `id` broadcast to `sizes` (empty view if id < 0).
  nk::View4 view(int32_t id, const std::vector<int64_t>& sizes) const {
    if (id < 0) return {};
    return native_view4(layout(id), data(id), sizes);
  }
};

nk::AttentionParams attention_params(const Operands& o, size_t q, size_t mask, size_t causal, size_t scale) {
  const Layout& ql = o.layout(o.arg_id(q));
  const Layout& kl = o.layout(o.arg_id(q + 1));
  nk::AttentionParams ap;
  ap.q = o.view(o.arg_id(q), ql.sizes);
  ap.k = o.view(o.arg_id(q + 1), kl.sizes);
  ap.v = o.view(o.arg_id(q + 2), o.layout(o.arg_id(q + 2)).sizes);
  ap.mask = o.view(o.arg_id(mask), {ql.sizes[0], ql.sizes[1], ql.sizes[2], kl.sizes[2]});
  ap.causal = o.n.args.at(causal).i != 0;
  const Arg& s = o.n.args.at(scale);
  ap.scale = s.kind == Arg::Kind::kNone ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(ql.sizes[3])))
                                        : static_cast<float>(s.scalar());
  return ap;
}

int64_t attention_work(const nk::AttentionParams& ap) {
  return ap.q.sizes[0] * ap.q.sizes[1] * ap.q.sizes[2] * ap.k.sizes[2] * (ap.k.sizes[3] + ap.v.sizes[3]);
}

void run_attention(const Operands& o, const nk::ParallelFor& pf) {
  const nk::AttentionParams ap = attention_params(o, 0, 3, 4, 5);
  const int32_t out = o.out_id(0);
  const nk::View4 out_view = o.view(out, o.layout(out).sizes);
  auto* lse = static_cast<float*>(o.data(o.out_id(1)));
  for (size_t i = 2; i < 4; ++i) {  // seed and offset: no dropout, so 0
    if (void* d = o.data(o.out_id(i))) std::memset(d, 0, sizeof(int64_t));
  }
  nk::attention_forward(ap, out_view, lse, threads_for(attention_work(ap), pf));
}

void run_attention_backward(const Operands& o, const nk::ParallelFor& pf) {
  const nk::AttentionParams ap = attention_params(o, 1, 4, 7, 8);
  const int32_t out = o.arg_id(5);
  const nk::View4 out_view = o.view(out, o.layout(out).sizes);
  const nk::View4 grad = o.view(o.arg_id(0), o.layout(out).sizes);
  nk::AttentionGrads g;
  for (size_t i = 0; i < 3; ++i) {
    const int32_t id = o.out_id(i);
    nk::View4& dst = i == 0 ? g.dq : (i == 1 ? g.dk : g.dv);
    if (id >= 0) dst = o.view(id, o.layout(id).sizes);
  }
  const auto* lse = static_cast<const float*>(o.data(o.arg_id(6)));
  nk::attention_backward(ap, out_view, lse, grad, g, threads_for(attention_work(ap), pf));
}

void run_row_norm(const Operands& o, const nk::ParallelFor& pf) {
  const int32_t x = o.arg_id(0), y = o.out_id(0);
  const RowsShape xs = rows_shape(o.layout(x)), ys = rows_shape(o.layout(y));
  nk::RowNormParams np;
  np.rows = xs.rows;
  np.cols = xs.cols;
  np.x = {o.data(x), *kernel_dtype(o.layout(x).dtype), xs.stride};
  np.y = {o.data(y), *kernel_dtype(o.layout(y).dtype), ys.stride};
  const auto affine = [&](size_t arg) {
    const int32_t id = o.arg_id(arg);
    nk::ColsView v;
    if (id >= 0) {
      v.data = o.data(id);
      v.dtype = kernel_dtype(o.layout(id).dtype).value();
    }
    return v;
  };
  np.weight = affine(1);
  np.bias = affine(2);
  np.eps = static_cast<float>(o.n.args.at(3).scalar());
  np.subtract_mean = o.n.args.at(4).i != 0;
  const int64_t rounding = o.n.args.at(5).i;
  if (rounding >= 0) {
    np.round_normalized = true;
    np.normalized_dtype = *kernel_dtype(static_cast<DType>(rounding));
  }
  np.mean = o.data(o.out_id(1));
  np.rstd = o.data(o.out_id(2));
  const int32_t stat = o.out_id(1) >= 0 ? o.out_id(1) : o.out_id(2);
  if (stat >= 0) np.stat_dtype = *kernel_dtype(o.layout(stat).dtype);
  nk::row_norm(np, threads_for(np.rows * np.cols * 8, pf));
}

void run_rope(const Operands& o, const nk::ParallelFor& pf, bool backward) {
  const int32_t x = o.arg_id(0), out = o.out_id(0);
  const std::vector<int64_t>& sizes = o.layout(x).sizes;
  const nk::RopeParams rp{o.view(x, sizes), o.view(o.arg_id(1), sizes), o.view(o.arg_id(2), sizes),
                          o.view(out, sizes), backward};
  nk::rope(rp, pf);
}

// self[..., index[j], ...] = source[..., j, ...] along `dim`, any strides;
// runs of the last dimension are copied whole when both are contiguous there.
void run_index_copy(const Operands& o) {
  const int32_t self = o.arg_id(0), index = o.arg_id(1), source = o.arg_id(2);
  const Layout& sl = o.layout(self);
  const Layout& il = o.layout(index);
  const Layout& srcl = o.layout(source);
  const auto dim = static_cast<size_t>(o.n.args.at(3).i);
  const int64_t rank = static_cast<int64_t>(sl.sizes.size());
  const int64_t size = sl.sizes[dim];
  const auto* idx = static_cast<const int64_t*>(o.data(index));
  const int64_t n = il.sizes.empty() ? 1 : il.sizes[0];
  const int64_t idx_stride = il.sizes.empty() ? 0 : il.strides[0];
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    int64_t r = idx[j * idx_stride];
    if (r < -size || r >= size) {
      throw std::runtime_error("index " + std::to_string(r) + " is out of bounds for dimension " +
                               std::to_string(dim) + " with size " + std::to_string(size));
    }
    rows[static_cast<size_t>(j)] = r < 0 ? r + size : r;
  }
  const int64_t elem = dtype_size(sl.dtype);
  auto* dst = static_cast<char*>(o.data(self));
  const auto* src = static_cast<const char*>(o.data(source));
  if (srcl.numel() == 0) return;
  // The last dimension as one run when both sides are contiguous along it
  // (and it is not the indexed one).
  const bool runs = rank > 0 && dim + 1 != static_cast<size_t>(rank) && sl.strides[rank - 1] == 1 &&
                    srcl.strides[rank - 1] == 1;
  const int64_t run = runs ? srcl.sizes[rank - 1] : 1;
  const int64_t outer_rank = runs ? rank - 1 : rank;
  std::vector<int64_t> at(static_cast<size_t>(outer_rank), 0);
  for (;;) {
    int64_t s_off = 0, d_off = 0;
    for (int64_t k = 0; k < outer_rank; ++k) {
      s_off += at[k] * srcl.strides[k];
      d_off += (static_cast<size_t>(k) == dim ? rows[at[k]] : at[k]) * sl.strides[k];
    }
    std::memcpy(dst + d_off * elem, src + s_off * elem, static_cast<size_t>(run * elem));
    int64_t k = outer_rank - 1;
    for (; k >= 0; --k) {
      if (++at[k] < srcl.sizes[k]) break;
      at[k] = 0;
    }
    if (k < 0) break;
  }
}

// Element strides of `l` broadcast (right-aligned) to `sizes`.
std::vector<int64_t> broadcast_strides(const Layout& l, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 0);
  const size_t lead = sizes.size() - l.sizes.size();
  for (size_t k = 0; k < l.sizes.size(); ++k) strides[lead + k] = l.sizes[k] == 1 ? 0 : l.strides[k];
  return strides;
}

// Calls body(offsets of each operand) for every element of `sizes`, in order.
template <size_t N, typename Body>
void for_each_element(const std::vector<int64_t>& sizes, const std::array<std::vector<int64_t>, N>& strides,
                      Body body) {
  for (int64_t s : sizes) if (s == 0) return;
  std::vector<int64_t> at(sizes.size(), 0);
  for (;;) {
    std::array<int64_t, N> off{};
    for (size_t o = 0; o < N; ++o) {
      for (size_t k = 0; k < sizes.size(); ++k) off[o] += at[k] * strides[o][k];
    }
    body(off);
    size_t k = sizes.size();
    for (; k > 0; --k) {
      if (++at[k - 1] < sizes[k - 1]) break;
      at[k - 1] = 0;
    }
    if (k == 0) return;
  }
}

template <typename T>
void int_add_typed(const Operands& o) {
  const int32_t out = o.out_id(0);
  const Layout& ol = o.layout(out);
  auto* y = static_cast<T*>(o.data(out));
  const int64_t alpha = o.n.args.at(2).i;
  const bool subtract = o.n.args.at(3).i != 0;
  const Arg& a = o.n.args.at(0);
  const Arg& b = o.n.args.at(1);
  const auto* pa = a.kind == Arg::Kind::kTensor ? static_cast<const T*>(o.data(static_cast<int32_t>(a.i))) : nullptr;
  const auto* pb = b.kind == Arg::Kind::kTensor ? static_cast<const T*>(o.data(static_cast<int32_t>(b.i))) : nullptr;
  const std::vector<int64_t> none(ol.sizes.size(), 0);
  const std::array<std::vector<int64_t>, 3> strides{
      ol.strides, pa ? broadcast_strides(o.layout(static_cast<int32_t>(a.i)), ol.sizes) : none,
      pb ? broadcast_strides(o.layout(static_cast<int32_t>(b.i)), ol.sizes) : none};
  // Wrapping arithmetic, as ATen's integer kernels do.
  using U = std::make_unsigned_t<T>;
  for_each_element(ol.sizes, strides, [&](const std::array<int64_t, 3>& off) {
    const U x = static_cast<U>(pa ? pa[off[1]] : static_cast<T>(a.i));
    const U z = static_cast<U>(static_cast<U>(pb ? pb[off[2]] : static_cast<T>(b.i)) * static_cast<U>(alpha));
    y[off[0]] = static_cast<T>(subtract ? x - z : x + z);
  });
}

void run_int_add(const Operands& o) {
  if (o.layout(o.out_id(0)).dtype == DType::kInt64) return int_add_typed<int64_t>(o);
  return int_add_typed<int32_t>(o);
}

void run_int_copy(const Operands& o) {
  const int32_t dst = o.arg_id(0), src = o.arg_id(1);
  const Layout& dl = o.layout(dst);
  const int64_t elem = dtype_size(dl.dtype);
  auto* d = static_cast<char*>(o.data(dst));
  const auto* s = static_cast<const char*>(o.data(src));
  const std::array<std::vector<int64_t>, 2> strides{dl.strides, broadcast_strides(o.layout(src), dl.sizes)};
  for_each_element(dl.sizes, strides, [&](const std::array<int64_t, 2>& off) {
    std::memcpy(d + off[0] * elem, s + off[1] * elem, static_cast<size_t>(elem));
  });
}

void run_embedding_backward_add(const Operands& o) {
  const int32_t self = o.arg_id(0), grad = o.arg_id(1), index = o.arg_id(2);
  const int64_t padding = o.n.args.at(3).i;
  const Layout &sl = o.layout(self), &gl = o.layout(grad), &il = o.layout(index);
  const int64_t rows = sl.sizes.at(0), dim = sl.sizes.at(1);
  auto* weight = static_cast<float*>(o.data(self));
  const auto* g = static_cast<const float*>(o.data(grad));
  const void* indices = o.data(index);
  // Each token's row and where its gradient starts, in token order.
  std::vector<std::pair<int64_t, int64_t>> tokens;
  const std::array<std::vector<int64_t>, 2> strides{
      il.strides, std::vector<int64_t>(gl.strides.begin(), gl.strides.end() - 1)};
  for_each_element(il.sizes, strides, [&](const std::array<int64_t, 2>& off) {
    const int64_t k = il.dtype == DType::kInt64 ? static_cast<const int64_t*>(indices)[off[0]]
                                                 : static_cast<const int32_t*>(indices)[off[0]];
    if (k < 0 || k >= rows) {
      throw std::runtime_error("embedding_dense_backward: index " + std::to_string(k) +
                               " is out of bounds for a weight of " + std::to_string(rows) + " rows");
    }
    if (k != padding) tokens.emplace_back(k, off[1]);
  });
  std::stable_sort(tokens.begin(), tokens.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const int64_t gs = gl.strides.back(), rs = sl.strides[0], cs = sl.strides[1];
  std::vector<float> sum(static_cast<size_t>(dim));
  for (size_t a = 0; a < tokens.size();) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    size_t b = a;
    for (; b < tokens.size() && tokens[b].first == tokens[a].first; ++b) {
      const float* row = g + tokens[b].second;
      for (int64_t d = 0; d < dim; ++d) sum[d] += row[d * gs];
    }
    float* out = weight + tokens[a].first * rs;
    for (int64_t d = 0; d < dim; ++d) out[d * cs] += sum[d];
    a = b;
  }
}

bool is_exact_int(DType t) { return t == DType::kInt64 || t == DType::kInt32; }

// Whether `l` broadcasts (right-aligned) to `sizes`.
bool broadcasts_to(const Layout& l, const std::vector<int64_t>& sizes) {
  if (l.sizes.size() > sizes.size()) return false;
  const size_t lead = sizes.size() - l.sizes.size();
  for (size_t k = 0; k < l.sizes.size(); ++k) {
    if (l.sizes[k] != 1 && l.sizes[k] != sizes[lead + k]) return false;
  }
  return true;
}

}  // namespace

int lower_integer_arithmetic(Graph& g) {
  int lowered = 0;
  for (Node& node : g.nodes) {
    if (node.op == kCopyInto) {
      const auto& a = node.args;
      if (a.size() < 2 || a[0].kind != Arg::Kind::kTensor || a[1].kind != Arg::Kind::kTensor) continue;
      const Layout& dl = g.value(static_cast<int32_t>(a[0].i)).layout;
      const Layout& sl = g.value(static_cast<int32_t>(a[1].i)).layout;
      if (!is_exact_int(dl.dtype) || sl.dtype != dl.dtype || !broadcasts_to(sl, dl.sizes)) continue;
      node.op = std::string(kNativeIntCopy);
      node.args = {a[0], a[1]};
      ++lowered;
      continue;
    }
    const bool add = node.op == "aten::add.Tensor", sub = node.op == "aten::sub.Tensor";
    if ((!add && !sub) || node.outputs.size() != 1 || node.outputs[0] < 0 || node.args.size() < 2) continue;
    const Value& out = g.value(node.outputs[0]);
    if (!is_exact_int(out.layout.dtype) || out.is_view()) continue;
    bool ok = true;
    int tensors = 0;
    for (size_t i = 0; i < 2 && ok; ++i) {
      const Arg& a = node.args[i];
      if (a.kind == Arg::Kind::kTensor) {
        const Layout& l = g.value(static_cast<int32_t>(a.i)).layout;
        ok = l.dtype == out.layout.dtype && broadcasts_to(l, out.layout.sizes);
        ++tensors;
      } else {
        ok = a.kind == Arg::Kind::kInt;
      }
    }
    int64_t alpha = 1;
    if (node.args.size() > 2) {
      const Arg& a = node.args[2];
      if (a.kind == Arg::Kind::kInt) alpha = a.i;
      else if (a.kind != Arg::Kind::kNone) ok = false;
    }
    if (!ok || tensors == 0) continue;
    node.op = std::string(kNativeIntAdd);
    node.args = {node.args[0], node.args[1], Arg::integer(alpha), Arg::boolean(sub)};
    ++lowered;
  }
  return lowered;
}

int lower_index_copies(Graph& g) {
  int lowered = 0;
  for (Node& node : g.nodes) {
    const bool put = node.op == "aten::index_put_.default";
    const bool copy = node.op == "aten::index_copy_.default";
    if ((!put && !copy) || !node.outputs.empty() || node.args.size() < (put ? 3u : 4u)) continue;
    const auto& a = node.args;
    int32_t self = -1, index = -1, source = -1;
    int64_t dim = -1;
    if (a[0].kind != Arg::Kind::kTensor) continue;
    self = static_cast<int32_t>(a[0].i);
    const Layout& sl = g.value(self).layout;
    const int64_t rank = static_cast<int64_t>(sl.sizes.size());
    if (put) {
      // index_put_(self, [None, ..., index], values, accumulate=False)
      if (a[1].kind != Arg::Kind::kTensorList || a[2].kind != Arg::Kind::kTensor) continue;
      if (a.size() > 3 && !(a[3].kind == Arg::Kind::kNone || (a[3].kind == Arg::Kind::kBool && a[3].i == 0))) continue;
      const auto& ids = a[1].ints;
      int given = 0;
      for (size_t k = 0; k < ids.size(); ++k) {
        if (ids[k] >= 0) {
          ++given;
          index = static_cast<int32_t>(ids[k]);
          dim = static_cast<int64_t>(k);
        }
      }
      if (given != 1 || static_cast<int64_t>(ids.size()) > rank) continue;
      source = static_cast<int32_t>(a[2].i);
    } else {
      // index_copy_(self, dim, index, source)
      if (a[1].kind != Arg::Kind::kInt || a[2].kind != Arg::Kind::kTensor || a[3].kind != Arg::Kind::kTensor) continue;
      dim = a[1].i < 0 ? a[1].i + rank : a[1].i;
      index = static_cast<int32_t>(a[2].i);
      source = static_cast<int32_t>(a[3].i);
    }
    if (dim < 0 || dim >= rank) continue;
    const Layout& il = g.value(index).layout;
    const Layout& srcl = g.value(source).layout;
    if (il.dtype != DType::kInt64 || il.sizes.size() != 1 || srcl.dtype != sl.dtype) continue;
    // Whole slices, no broadcasting: the source is self's shape with dim's
    // size the index's length.
    std::vector<int64_t> want = sl.sizes;
    want[dim] = il.sizes[0];
    if (srcl.sizes != want) continue;
    node.op = std::string(kNativeIndexCopy);
    node.args = {Arg::tensor(self), Arg::tensor(index), Arg::tensor(source), Arg::integer(dim)};
    ++lowered;
  }
  return lowered;
}

bool is_native_op(std::string_view op) { return op.starts_with("neuron::"); }

void run_native(const Program& p, const RunBuffers& b, const Step& s, const nk::ParallelFor& pf) {
  const Operands o{p, b, s.node};
  const std::string_view op = s.node.op;
  if (op == kNativeAttention) return run_attention(o, pf);
  if (op == kNativeAttentionBackward) return run_attention_backward(o, pf);
  if (op == kNativeRowNorm) return run_row_norm(o, pf);
  if (op == kNativeRope) return run_rope(o, pf, false);
  if (op == kNativeRopeBackward) return run_rope(o, pf, true);
  if (op == kNativeIndexCopy) return run_index_copy(o);
  if (op == kNativeEmbeddingBackwardAdd) return run_embedding_backward_add(o);
  if (op == kNativeIntAdd) return run_int_add(o);
  if (op == kNativeIntCopy) return run_int_copy(o);
  throw CompileError("unknown native op " + s.node.op);
}

}  // namespace neuroncompiler
