// Helpers shared by the collective implementations.
#pragma once

#include <cstring>
#include <string>

#include "group_impl.hpp"
#include "reduce_kernels.hpp"
#include "stream_copy.hpp"

namespace neuroncoll::algorithms {

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// memcpy that accepts null pointers for zero bytes.
inline void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

// Elements of round k: [k * chunk, k * chunk + part) of count.
inline size_t part(size_t count, size_t chunk, size_t k) {
  const size_t off = std::min(count, k * chunk);
  return std::min(chunk, count - off);
}

inline Descriptor make_descriptor(Kind kind, DType dtype, size_t count, int root) {
  Descriptor d;
  d.kind = kind;
  d.dtype = dtype;
  d.count = count;
  d.root = root;
  return d;
}

inline Descriptor make_reducing(Kind kind, DType dtype, ReduceOp op, size_t count, int root,
                                double scale) {
  Descriptor d = make_descriptor(kind, dtype, count, root);
  d.op = op;
  d.uses_op = true;
  d.scale = scale;
  return d;
}

// A group of one runs no rounds: the reduction of one source, or a copy.
inline Status single_rank_reduce(Group::Impl& g, const Status& local, const Descriptor& d,
                                 const void* in, void* out) {
  ++g.seq;
  if (!local.ok()) return local;
  const void* srcs[1] = {in};
  reduce(d.dtype, d.op, out, srcs, &d.scale, 1, d.count, 1);
  return {};
}

inline Status single_rank_copy(Group::Impl& g, const Status& local, const void* in, void* out,
                               size_t bytes) {
  ++g.seq;
  if (!local.ok()) return local;
  if (in != out) copy_bytes(out, in, bytes);
  return {};
}

// Checks this rank's arguments; on failure marks `desc` invalid (peers learn
// of it at the descriptor round).
inline Status check_local(Group::Impl& g, Descriptor& desc, const void* in, const void* out,
                          bool in_used, bool out_used) {
  const char* what = kind_name(desc.kind);
  if (static_cast<int>(desc.dtype) >= kNumDTypes) {
    return g.invalid(desc, "unknown dtype " + std::to_string(static_cast<int>(desc.dtype)));
  }
  if (desc.uses_op && !op_supported(desc.dtype, desc.op)) {
    return g.invalid(desc, std::string("op ") + reduce_op_name(desc.op) +
                               " is not defined for dtype " + dtype_name(desc.dtype));
  }
  const bool rooted = desc.kind == Kind::kBroadcast || desc.kind == Kind::kReduce ||
                      desc.kind == Kind::kGather || desc.kind == Kind::kScatter;
  if (rooted && (desc.root < 0 || desc.root >= g.size())) {
    return g.invalid(desc, "root " + std::to_string(desc.root) + " outside a group of size " +
                               std::to_string(g.size()));
  }
  if (desc.count > 0 && ((in_used && !in) || (out_used && !out))) {
    return g.invalid(desc, std::string(what) + " got a null buffer for count " +
                               std::to_string(desc.count));
  }
  return {};
}

}  // namespace neuroncoll::algorithms
