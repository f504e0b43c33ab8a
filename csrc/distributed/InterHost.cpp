// InterHost's collectives (see InterHost.h): shared memory inside each host,
// gloo between hosts.
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstring>

#include "csrc/distributed/InterHost.h"

namespace torchneuron {

using neuroncoll::Code;
using neuroncoll::Status;

namespace {

at::ScalarType scalar_type(neuroncoll::DType dtype) {
  using neuroncoll::DType;
  switch (dtype) {
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat64: return at::kDouble;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
    case DType::kInt8: return at::kChar;
    case DType::kInt16: return at::kShort;
    case DType::kInt32: return at::kInt;
    case DType::kInt64: return at::kLong;
    case DType::kUInt8: return at::kByte;
    case DType::kBool: return at::kBool;
  }
  return at::kByte;
}

// A CPU view of `count` elements at `data` (device memory: no copy).
at::Tensor view(const void* data, size_t count, neuroncoll::DType dtype) {
  return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(count)},
                       at::TensorOptions().dtype(scalar_type(dtype)));
}

at::Tensor bytes(const void* data, size_t n) {
  return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(n)}, at::kByte);
}

void run(c10::intrusive_ptr<c10d::Work> work) { work->wait(); }

// Reductions between hosts: what the reduced values cross as, and with
// which gloo op (AVG and PREMUL_SUM are sums here, scaled by us).
struct Wire {
  at::ScalarType type;
  c10d::ReduceOp op;
};

Wire wire_for(neuroncoll::DType dtype, neuroncoll::ReduceOp op) {
  using neuroncoll::DType;
  using neuroncoll::ReduceOp;
  if (dtype == DType::kBool) {  // bytes 0/1: SUM and MAX are OR, PRODUCT and MIN are AND
    switch (op) {
      case ReduceOp::kProduct: case ReduceOp::kMin: case ReduceOp::kBitwiseAnd:
        return {at::kByte, c10d::ReduceOp::MIN};
      case ReduceOp::kBitwiseXor: return {at::kByte, c10d::ReduceOp::BXOR};
      default: return {at::kByte, c10d::ReduceOp::MAX};
    }
  }
  at::ScalarType type = scalar_type(dtype);
  // 16-bit floats in float32 (gloo would round after every step); int16 in
  // int32 (gloo has no int16 kernels; sums and products wrap alike).
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) type = at::kFloat;
  if (dtype == DType::kInt16) type = at::kInt;
  switch (op) {
    case ReduceOp::kProduct: return {type, c10d::ReduceOp::PRODUCT};
    case ReduceOp::kMin: return {type, c10d::ReduceOp::MIN};
    case ReduceOp::kMax: return {type, c10d::ReduceOp::MAX};
    case ReduceOp::kBitwiseAnd: return {type, c10d::ReduceOp::BAND};
    case ReduceOp::kBitwiseOr: return {type, c10d::ReduceOp::BOR};
    case ReduceOp::kBitwiseXor: return {type, c10d::ReduceOp::BXOR};
    default: return {type, c10d::ReduceOp::SUM};  // kSum, kAvg, kPremulSum
  }
}

// Inside a host AVG is a sum (divided once, by the group size, at the end);
// PREMUL_SUM stays itself (each rank's factor is applied by neuroncoll).
neuroncoll::ReduceOp local_op(neuroncoll::ReduceOp op) {
  return op == neuroncoll::ReduceOp::kAvg ? neuroncoll::ReduceOp::kSum : op;
}

}  // namespace

Status InterHost::leader_then_local(const char* what, const std::function<void()>& step,
                                    const std::function<Status()>& after) {
  if (topo_.is_leader()) {
    Status s = gloo_step(what, step);
    if (!s.ok()) {
      // The host's other ranks wait for this one: they fail with its message.
      if (local_.size() > 1) (void)local_.fail(s.message());
      return s;
    }
  }
  return after();
}

void InterHost::leaders_all_reduce(void* data, size_t count, DType dtype, ReduceOp op) {
  const Wire w = wire_for(dtype, op);
  at::Tensor t = view(data, count, dtype);
  at::Tensor x = dtype == DType::kBool ? t.view(at::kByte) : t;
  if (x.scalar_type() != w.type) x = x.to(w.type);
  std::vector<at::Tensor> ts{x};
  c10d::AllreduceOptions opts;
  opts.reduceOp = w.op;
  opts.timeout = timeout_;
  run(groups_.leaders->allreduce(ts, opts));
  if (op == ReduceOp::kAvg) {
    if (neuroncoll::is_floating(dtype)) {
      x.div_(size_);
    } else {
      if (x.scalar_type() != t.scalar_type()) x = x.to(t.scalar_type());  // wrap first, as the sum does
      x.div_(size_, "trunc");
    }
  }
  if (!x.is_same(t) && !(dtype == DType::kBool && x.data_ptr() == t.data_ptr())) t.copy_(x);
}

Status InterHost::all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             double factor) {
  NEURONCOLL_RETURN_IF_ERROR(agree("all_reduce", dtype, count, -1, &op));
  NEURONCOLL_RETURN_IF_ERROR(local_.reduce(in, out, count, dtype, local_op(op), 0, factor));
  return leader_then_local(
      "all_reduce", [&] { leaders_all_reduce(out, count, dtype, op); },
      [&] { return local_.broadcast(out, count, dtype, 0); });
}

Status InterHost::reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                         int root, double factor) {
  NEURONCOLL_RETURN_IF_ERROR(agree("reduce", dtype, count, root, &op));
  // The all_reduce's steps into a buffer of this rank; the root keeps it.
  std::vector<char> tmp(count * neuroncoll::dtype_size(dtype));
  NEURONCOLL_RETURN_IF_ERROR(local_.reduce(in, tmp.data(), count, dtype, local_op(op), 0, factor));
  NEURONCOLL_RETURN_IF_ERROR(leader_then_local(
      "reduce", [&] { leaders_all_reduce(tmp.data(), count, dtype, op); },
      [&] { return local_.broadcast(tmp.data(), count, dtype, 0); }));
  if (rank_ == root && !tmp.empty()) std::memcpy(out, tmp.data(), tmp.size());
  return {};
}

Status InterHost::reduce_scatter(const void* in, void* out, size_t count, DType dtype,
                                 ReduceOp op, double factor) {
  NEURONCOLL_RETURN_IF_ERROR(agree("reduce_scatter", dtype, count, -1, &op));
  const size_t esz = neuroncoll::dtype_size(dtype);
  const size_t total = count * static_cast<size_t>(size_);
  std::vector<char> tmp(total * esz);
  NEURONCOLL_RETURN_IF_ERROR(local_.reduce(in, tmp.data(), total, dtype, local_op(op), 0, factor));
  NEURONCOLL_RETURN_IF_ERROR(leader_then_local(
      "reduce_scatter", [&] { leaders_all_reduce(tmp.data(), total, dtype, op); },
      [&] { return local_.broadcast(tmp.data(), total, dtype, 0); }));
  if (count) std::memcpy(out, tmp.data() + static_cast<size_t>(rank_) * count * esz, count * esz);
  return {};
}

Status InterHost::broadcast(void* buffer, size_t count, DType dtype, int root) {
  NEURONCOLL_RETURN_IF_ERROR(agree("broadcast", dtype, count, root, nullptr));
  const int root_host = topo_.host_of[root];
  const bool mine = topo_.host() == root_host;
  if (mine) {
    NEURONCOLL_RETURN_IF_ERROR(local_.broadcast(buffer, count, dtype, topo_.local_index[root]));
  }
  return leader_then_local(
      "broadcast",
      [&] {
        std::vector<at::Tensor> ts{bytes(buffer, count * neuroncoll::dtype_size(dtype))};
        c10d::BroadcastOptions opts;
        opts.rootRank = root_host;  // leaders' group: rank = host index
        opts.timeout = timeout_;
        run(groups_.leaders->broadcast(ts, opts));
      },
      [&] { return mine ? Status() : local_.broadcast(buffer, count, dtype, 0); });
}

Status InterHost::all_gather(const void* in, void* out, size_t count, DType dtype) {
  NEURONCOLL_RETURN_IF_ERROR(agree("all_gather", dtype, count, -1, nullptr));
  const size_t block = count * neuroncoll::dtype_size(dtype);
  // Each host's blocks to its leader, in the host's rank order...
  const std::vector<int>& mine = topo_.local_ranks();
  std::vector<char> host_blocks(topo_.is_leader() ? mine.size() * block : 0);
  NEURONCOLL_RETURN_IF_ERROR(local_.gather(in, host_blocks.data(), count, dtype, 0));
  return leader_then_local(
      "all_gather",
      [&] {
        // ... between leaders, padded to the largest host ...
        size_t widest = 0;
        for (const auto& h : topo_.hosts) widest = std::max(widest, h.size());
        const int hosts = static_cast<int>(topo_.hosts.size());
        at::Tensor padded = at::empty({static_cast<int64_t>(widest * block)}, at::kByte);
        if (!host_blocks.empty()) std::memcpy(padded.data_ptr(), host_blocks.data(), host_blocks.size());
        std::vector<at::Tensor> gathered;
        for (int h = 0; h < hosts; ++h) gathered.push_back(at::empty_like(padded));
        std::vector<std::vector<at::Tensor>> outs{gathered};
        std::vector<at::Tensor> ins{padded};
        c10d::AllgatherOptions opts;
        opts.timeout = timeout_;
        run(groups_.leaders->allgather(outs, ins, opts));
        // ... and put in rank order.
        for (int h = 0; h < hosts; ++h) {
          const char* src = static_cast<const char*>(outs[0][h].data_ptr());
          for (size_t i = 0; i < topo_.hosts[h].size(); ++i) {
            if (block) {
              std::memcpy(static_cast<char*>(out) + static_cast<size_t>(topo_.hosts[h][i]) * block,
                          src + i * block, block);
            }
          }
        }
      },
      [&] { return local_.broadcast(out, count * static_cast<size_t>(size_), dtype, 0); });
}

Status InterHost::gather(const void* in, void* out, size_t count, DType dtype, int root) {
  NEURONCOLL_RETURN_IF_ERROR(agree("gather", dtype, count, root, nullptr));
  const size_t block = count * neuroncoll::dtype_size(dtype);
  return gloo_step("gather", [&] {
    std::vector<std::vector<at::Tensor>> outs;
    if (rank_ == root) {
      outs.emplace_back();
      for (int p = 0; p < size_; ++p) {
        outs[0].push_back(bytes(static_cast<char*>(out) + static_cast<size_t>(p) * block, block));
      }
    }
    std::vector<at::Tensor> ins{bytes(in, block)};
    c10d::GatherOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout_;
    run(groups_.all->gather(outs, ins, opts));
  });
}

Status InterHost::scatter(const void* in, void* out, size_t count, DType dtype, int root) {
  NEURONCOLL_RETURN_IF_ERROR(agree("scatter", dtype, count, root, nullptr));
  const size_t block = count * neuroncoll::dtype_size(dtype);
  return gloo_step("scatter", [&] {
    std::vector<std::vector<at::Tensor>> ins;
    if (rank_ == root) {
      ins.emplace_back();
      for (int p = 0; p < size_; ++p) {
        ins[0].push_back(bytes(static_cast<const char*>(in) + static_cast<size_t>(p) * block, block));
      }
    }
    std::vector<at::Tensor> outs{bytes(out, block)};
    c10d::ScatterOptions opts;
    opts.rootRank = root;
    opts.timeout = timeout_;
    run(groups_.all->scatter(outs, ins, opts));
  });
}

Status InterHost::all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                             std::span<const size_t> recv_counts, DType dtype) {
  size_t sent = 0, received = 0;
  for (size_t c : send_counts) sent += c;
  for (size_t c : recv_counts) received += c;
  NEURONCOLL_RETURN_IF_ERROR(agree("all_to_all", dtype, 0, -1, nullptr));
  // Every rank's split sizes, so that a disagreement is an error on every
  // rank rather than a gloo failure on some.
  std::string table(sizeof(uint64_t) * 2 * size_, '\0');
  auto* mine = reinterpret_cast<uint64_t*>(table.data());
  for (int q = 0; q < size_; ++q) {
    mine[q] = send_counts[q];
    mine[size_ + q] = recv_counts[q];
  }
  std::vector<std::string> all;
  NEURONCOLL_RETURN_IF_ERROR(exchange(table, &all, "all_to_all"));
  std::string disagree;
  for (int p = 0; p < size_; ++p) {
    for (int q = 0; q < size_; ++q) {
      const uint64_t sends = reinterpret_cast<const uint64_t*>(all[p].data())[q];
      const uint64_t expects = reinterpret_cast<const uint64_t*>(all[q].data())[size_ + p];
      if (sends != expects && disagree.size() < 400) {
        disagree += " rank " + std::to_string(p) + " sends " + std::to_string(sends) +
                    " to rank " + std::to_string(q) + ", which expects " + std::to_string(expects) + ";";
      }
    }
  }
  if (!disagree.empty()) {
    return {Code::kMismatch, "all_to_all (group '" + name_ + "'): split sizes disagree:" + disagree};
  }
  const size_t esz = neuroncoll::dtype_size(dtype);
  return gloo_step("all_to_all", [&] {
    at::Tensor src = bytes(in, sent * esz), dst = bytes(out, received * esz);
    std::vector<int64_t> in_splits, out_splits;
    for (int q = 0; q < size_; ++q) {
      in_splits.push_back(static_cast<int64_t>(send_counts[q] * esz));
      out_splits.push_back(static_cast<int64_t>(recv_counts[q] * esz));
    }
    c10d::AllToAllOptions opts;
    opts.timeout = timeout_;
    run(groups_.all->alltoall_base(dst, src, out_splits, in_splits, opts));
  });
}

}  // namespace torchneuron
