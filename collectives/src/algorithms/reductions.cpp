// The reducing collectives: all_reduce, reduce, reduce_scatter.
//
// all_reduce picks by size. Small (<= small_message_bytes): every rank stages
// its input, one round, every rank reduces all staged inputs locally (one
// round trip: the latency path). Large: reduce-scatter then all-gather per
// chunk: rank r reduces part r of the chunk from every rank's copy and the
// others copy the reduced parts, so each byte is reduced once. When every
// rank's input and output live in SharedArenas, the large path reads peers'
// buffers directly with no staging copy; so does a reduce_scatter of more
// than one round. Each element is always reduced in rank order 0..n-1 by one
// kernel, so every rank ends with the same bits.
#include <vector>

#include "common.hpp"
#include "reduce_kernels.hpp"

namespace neuroncoll {

using algorithms::ceil_div;
using algorithms::copy_bytes;
using algorithms::copy_output;

void Group::Impl::reduce_staged(const Descriptor& d, size_t offset, void* out, size_t count,
                                const void* own) {
  const int n = size();
  std::vector<const void*> srcs(n);
  std::vector<double> scales(n);
  for (int p = 0; p < n; ++p) {
    srcs[p] = p == rank() && own ? own : staging(p) + offset;
    scales[p] = slot(p).desc.scale;
  }
  algorithms::reduce(d.dtype, d.op, out, srcs.data(), scales.data(), n, count, n);
}

Status Group::Impl::all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                               double scale) {
  NEURONCOLL_RETURN_IF_ERROR(begin("all_reduce"));
  Descriptor d = algorithms::make_reducing(Kind::kAllReduce, dtype, op, count, -1, scale);
  Status local = algorithms::check_local(*this, d, in, out, true, true);
  const int n = size();
  const int me = rank();
  if (n == 1) return algorithms::single_rank_reduce(*this, local, d, in, out);
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  const size_t bytes = count * esz;
  std::vector<const void*> srcs(n);
  std::vector<double> scales(n);
  auto gather_scales = [&] {
    for (int p = 0; p < n; ++p) scales[p] = slot(p).desc.scale;
  };

  if (bytes <= small_message_bytes) {
    ++stats.small_all_reduces;
    return run(
        d, 1, [&](size_t) { copy_bytes(staging(me), in, bytes); },
        [&](size_t) {
          reduce_staged(d, 0, out, count);
          return Status{};
        });
  }

  // In place, this rank read its output's lines a moment ago: they are in
  // the caches, and streaming them out measured no faster (or slower).
  const size_t streamed_bytes = in == out ? 0 : bytes;
  if (local.ok()) {
    d.in = arena_of(in, bytes);
    d.out = arena_of(out, bytes);
  }
  NEURONCOLL_RETURN_IF_ERROR(acquire("all_reduce"));
  NEURONCOLL_RETURN_IF_ERROR(exchange(d));
  gather_scales();
  bool direct = true;
  for (int p = 0; p < n; ++p) direct = direct && slot(p).desc.in.uid && slot(p).desc.out.uid;

  std::vector<char*> pin, pout;
  if (direct) NEURONCOLL_RETURN_IF_ERROR(check_direct("all_reduce", &pin, &pout, &direct));
  if (direct) {
    ++stats.direct_all_reduces;
    size_t b, e;
    slice_of(count, esz, n, me, &b, &e);
    for (int p = 0; p < n; ++p) srcs[p] = pin[p] + b * esz;
    algorithms::reduce(dtype, op, static_cast<char*>(out) + b * esz, srcs.data(), scales.data(), n,
                       e - b, n);
    NEURONCOLL_RETURN_IF_ERROR(round("all_reduce"));
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      slice_of(count, esz, n, p, &b, &e);
      copy_output(static_cast<char*>(out) + b * esz, pout[p] + b * esz, (e - b) * esz,
                  streamed_bytes);
    }
    // Peers may still read this rank's buffers until everyone is here.
    return round("all_reduce");
  }

  ++stats.chunked_all_reduces;
  const size_t chunk = staging_bytes / esz;
  for (size_t off = 0; off < count; off += chunk) {
    if (off > 0) NEURONCOLL_RETURN_IF_ERROR(acquire("all_reduce"));
    const size_t m = std::min(chunk, count - off);
    copy_bytes(staging(me), static_cast<const char*>(in) + off * esz, m * esz);
    NEURONCOLL_RETURN_IF_ERROR(round("all_reduce"));
    size_t b, e;
    slice_of(m, esz, n, me, &b, &e);
    reduce_staged(d, b * esz, staging(me) + b * esz, e - b);
    NEURONCOLL_RETURN_IF_ERROR(round("all_reduce"));
    for (int p = 0; p < n; ++p) {
      slice_of(m, esz, n, p, &b, &e);
      copy_output(static_cast<char*>(out) + (off + b) * esz, staging(p) + b * esz, (e - b) * esz,
                  streamed_bytes);
    }
    release();
  }
  return {};
}

Status Group::Impl::reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                           int root, double scale) {
  NEURONCOLL_RETURN_IF_ERROR(begin("reduce"));
  Descriptor d = algorithms::make_reducing(Kind::kReduce, dtype, op, count, root, scale);
  const int n = size();
  const int me = rank();
  Status local = algorithms::check_local(*this, d, in, out, true, me == root);
  if (n == 1) return algorithms::single_rank_reduce(*this, local, d, in, out);
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  const size_t chunk = staging_bytes / esz;
  const size_t rounds = std::max<size_t>(1, ceil_div(count, chunk));
  return run(
      d, rounds,
      [&](size_t k) {
        const size_t off = k * chunk, m = algorithms::part(count, chunk, k);
        copy_bytes(staging(me), static_cast<const char*>(in) + off * esz, m * esz);
      },
      [&](size_t k) {
        if (me == root) {
          reduce_staged(d, 0, static_cast<char*>(out) + k * chunk * esz, algorithms::part(count, chunk, k));
        }
        return Status{};
      });
}

Status Group::Impl::reduce_scatter(const void* in, void* out, size_t count, DType dtype,
                                   ReduceOp op, double scale) {
  NEURONCOLL_RETURN_IF_ERROR(begin("reduce_scatter"));
  Descriptor d = algorithms::make_reducing(Kind::kReduceScatter, dtype, op, count, -1, scale);
  const int n = size();
  const int me = rank();
  Status local = algorithms::check_local(*this, d, in, out, true, true);
  if (n == 1) return algorithms::single_rank_reduce(*this, local, d, in, out);
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  // Staging holds one region per destination rank. A rank reduces its own
  // part of its input where it is, so its own region of its own staging is
  // free: a large output is reduced there (in the caches) and streamed out.
  const size_t chunk = staging_bytes / (esz * n);
  const size_t region = chunk * esz;
  const size_t rounds = std::max<size_t>(1, ceil_div(count, chunk));
  const bool stream = count * esz >= algorithms::kStreamOutputBytes;
  auto write = [&](size_t k) {
    const size_t off = k * chunk, m = algorithms::part(count, chunk, k);
    for (int q = 0; q < n; ++q) {
      if (q == me) continue;
      copy_bytes(staging(me) + q * region, static_cast<const char*>(in) + (q * count + off) * esz,
                 m * esz);
    }
  };
  auto read = [&](size_t k) {
    const size_t off = k * chunk, m = algorithms::part(count, chunk, k);
    char* dst = static_cast<char*>(out) + off * esz;
    char* scratch = staging(me) + me * region;
    reduce_staged(d, me * region, stream ? scratch : dst, m,
                  static_cast<const char*>(in) + (me * count + off) * esz);
    if (stream) algorithms::stream_bytes(dst, scratch, m * esz);
    return Status{};
  };
  const size_t in_bytes = count * esz * n;
  // One round: staged (a direct attempt costs a descriptor round first).
  if (in_bytes <= staging_bytes) return run(d, rounds, write, read);

  // With every rank's input in an arena: each rank reduces its part straight
  // from every rank's input (no staging copy), through its own staging when
  // the output is streamed.
  if (local.ok()) d.in = arena_of(in, in_bytes);
  NEURONCOLL_RETURN_IF_ERROR(acquire("reduce_scatter"));
  NEURONCOLL_RETURN_IF_ERROR(exchange(d));
  bool direct = true;
  for (int p = 0; p < n; ++p) direct = direct && slot(p).desc.in.uid;
  std::vector<char*> pin, pout;
  if (direct) NEURONCOLL_RETURN_IF_ERROR(check_direct("reduce_scatter", &pin, &pout, &direct));
  if (!direct) return staged_rounds(0, rounds, write, read, "reduce_scatter");
  ++stats.direct_reduce_scatters;
  std::vector<const void*> srcs(n);
  std::vector<double> scales(n);
  for (int p = 0; p < n; ++p) scales[p] = slot(p).desc.scale;
  const size_t step_count = stream ? staging_bytes / esz : count;
  for (size_t off = 0; off < count; off += step_count) {
    const size_t m = std::min(step_count, count - off);
    for (int p = 0; p < n; ++p) srcs[p] = pin[p] + (me * count + off) * esz;
    char* dst = static_cast<char*>(out) + off * esz;
    algorithms::reduce(dtype, op, stream ? staging(me) : dst, srcs.data(), scales.data(), n, m, n);
    if (stream) algorithms::stream_bytes(dst, staging(me), m * esz);
  }
  return round("reduce_scatter");  // peers are done reading this rank's input
}

}  // namespace neuroncoll
