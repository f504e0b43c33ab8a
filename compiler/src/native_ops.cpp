#include "neuroncompiler/native_ops.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

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

void run_rope(const Operands& o, const nk::ParallelFor& pf) {
  const int32_t x = o.arg_id(0), out = o.out_id(0);
  const std::vector<int64_t>& sizes = o.layout(x).sizes;
  const nk::RopeParams rp{o.view(x, sizes), o.view(o.arg_id(1), sizes), o.view(o.arg_id(2), sizes),
                          o.view(out, sizes)};
  nk::rope(rp, pf);
}

}  // namespace

bool is_native_op(std::string_view op) { return op.starts_with("neuron::"); }

void run_native(const Program& p, const RunBuffers& b, const Step& s, const nk::ParallelFor& pf) {
  const Operands o{p, b, s.node};
  const std::string_view op = s.node.op;
  if (op == kNativeAttention) return run_attention(o, pf);
  if (op == kNativeAttentionBackward) return run_attention_backward(o, pf);
  if (op == kNativeRowNorm) return run_row_norm(o, pf);
  if (op == kNativeRope) return run_rope(o, pf);
  throw CompileError("unknown native op " + s.node.op);
}

}  // namespace neuroncompiler
