#include "csrc/distributed/Communicator.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <deque>

#include "csrc/distributed/C10dStoreAdapter.h"
#include "csrc/distributed/CollectiveTypes.h"

namespace torchneuron {

using neuroncoll::Status;

Communicator::Communicator(const c10::intrusive_ptr<c10d::Store>& store, HostTopology topology,
                           std::chrono::milliseconds timeout, const std::string& name,
                           InterHostGroups groups)
    : topo_(std::move(topology)) {
  neuroncoll::GroupOptions o;
  o.timeout = timeout;
  // The name tells the group's shared-memory segment apart in /dev/shm.
  o.name = name;
  if (!topo_.multi_host()) {
    // The store is already the group's own (c10d prefixes it per group).
    o.store = std::make_shared<C10dStoreAdapter>(store);
    o.rank = topo_.rank;
    o.size = size();
  } else {
    const std::string host = std::to_string(topo_.host());
    o.store = std::make_shared<C10dStoreAdapter>(
        c10::make_intrusive<c10d::PrefixStore>("neuron/host" + host, store));
    o.name += "-h" + host;
    o.rank = topo_.local_index[topo_.rank];
    o.size = static_cast<int>(topo_.local_ranks().size());
    o.rank_labels = topo_.local_ranks();
  }
  check_status(neuroncoll::Group::create(o, &local_));
  if (topo_.multi_host()) {
    inter_ = std::make_unique<InterHost>(*local_, topo_, std::move(groups), timeout, name);
  }
}

Communicator::~Communicator() = default;

Status Communicator::fail(const std::string& message) {
  if (local_->size() < 2) return {};
  return local_->fail(message);
}

void Communicator::abort() {
  local_->abort();
  if (inter_) inter_->abort();
}

Status Communicator::all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                double premul_factor) {
  if (inter_) return inter_->all_reduce(in, out, count, dtype, op, premul_factor);
  return local_->all_reduce(in, out, count, dtype, op, premul_factor);
}

Status Communicator::broadcast(void* buffer, size_t count, DType dtype, int root) {
  if (inter_) return inter_->broadcast(buffer, count, dtype, root);
  return local_->broadcast(buffer, count, dtype, root);
}

Status Communicator::reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                            int root, double premul_factor) {
  if (inter_) return inter_->reduce(in, out, count, dtype, op, root, premul_factor);
  return local_->reduce(in, out, count, dtype, op, root, premul_factor);
}

Status Communicator::all_gather(const void* in, void* out, size_t count, DType dtype) {
  if (inter_) return inter_->all_gather(in, out, count, dtype);
  return local_->all_gather(in, out, count, dtype);
}

Status Communicator::reduce_scatter(const void* in, void* out, size_t count, DType dtype,
                                    ReduceOp op, double premul_factor) {
  if (inter_) return inter_->reduce_scatter(in, out, count, dtype, op, premul_factor);
  return local_->reduce_scatter(in, out, count, dtype, op, premul_factor);
}

Status Communicator::gather(const void* in, void* out, size_t count, DType dtype, int root) {
  if (inter_) return inter_->gather(in, out, count, dtype, root);
  return local_->gather(in, out, count, dtype, root);
}

Status Communicator::scatter(const void* in, void* out, size_t count, DType dtype, int root) {
  if (inter_) return inter_->scatter(in, out, count, dtype, root);
  return local_->scatter(in, out, count, dtype, root);
}

Status Communicator::all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                                std::span<const size_t> recv_counts, DType dtype) {
  if (inter_) return inter_->all_to_all(in, send_counts, out, recv_counts, dtype);
  return local_->all_to_all(in, send_counts, out, recv_counts, dtype);
}

Status Communicator::barrier() { return inter_ ? inter_->barrier() : local_->barrier(); }

Status Communicator::send(const void* buffer, size_t count, DType dtype, int peer, int tag) {
  if (!inter_) return local_->send(buffer, count, dtype, peer, tag);
  if (topo_.same_host(peer)) return local_->send(buffer, count, dtype, topo_.local_index[peer], tag);
  InterHost::Posted op = inter_->post(true, const_cast<void*>(buffer), count, dtype, peer, tag);
  return inter_->finish(op);
}

Status Communicator::recv(void* buffer, size_t count, DType dtype, int peer, int tag) {
  if (!inter_) return local_->recv(buffer, count, dtype, peer, tag);
  if (topo_.same_host(peer)) return local_->recv(buffer, count, dtype, topo_.local_index[peer], tag);
  InterHost::Posted op = inter_->post(false, buffer, count, dtype, peer, tag);
  return inter_->finish(op);
}

// Operations with ranks of other hosts are posted first and finished last.
// Those of this host go in pieces no larger than a channel (64 KiB, one in
// flight per ordered pair of ranks): each step sends at most one piece to
// every peer, then receives at most one from every peer. A send of step s
// needs the peer to have taken piece s - 1, which it did in its step s - 1,
// so the batch cannot deadlock. Both sides of a pair cut their messages
// alike and keep them in call order, so pieces meet their receives.
Status Communicator::p2p_batch(std::span<const P2P> ops) {
  std::vector<InterHost::Posted> remote;
  Status first;
  auto keep = [&first](Status s) {
    if (first.ok() && !s.ok()) first = std::move(s);
  };
  for (const P2P& op : ops) {
    if (inter_ && !topo_.same_host(op.peer)) {
      try {
        remote.push_back(inter_->post(op.is_send, op.data, op.count, op.dtype, op.peer, op.tag));
      } catch (const std::exception& e) {
        keep(Status(neuroncoll::Code::kSystemError, std::string("posting a send/recv between hosts: ") + e.what()));
      }
    }
  }
  constexpr size_t kPieceBytes = 64 << 10;
  struct Piece {
    const P2P* op;
    size_t begin, count;
  };
  std::vector<std::deque<Piece>> sends(size()), recvs(size());
  for (const P2P& op : ops) {
    if (inter_ && !topo_.same_host(op.peer)) continue;
    const size_t per = std::max<size_t>(1, kPieceBytes / neuroncoll::dtype_size(op.dtype));
    auto& queue = op.is_send ? sends[op.peer] : recvs[op.peer];
    size_t begin = 0;
    do {  // an empty message is one empty piece
      const size_t n = std::min(per, op.count - begin);
      queue.push_back({&op, begin, n});
      begin += n;
    } while (begin < op.count);
  }
  auto data = [](const Piece& p) {
    return static_cast<char*>(p.op->data) + p.begin * neuroncoll::dtype_size(p.op->dtype);
  };
  for (bool pending = first.ok(); pending;) {
    pending = false;
    for (auto& q : sends) {
      if (q.empty() || !first.ok()) continue;
      const Piece& p = q.front();
      keep(send(data(p), p.count, p.op->dtype, p.op->peer, p.op->tag));
      q.pop_front();
      pending = true;
    }
    for (auto& q : recvs) {
      if (q.empty() || !first.ok()) continue;
      const Piece& p = q.front();
      keep(recv(data(p), p.count, p.op->dtype, p.op->peer, p.op->tag));
      q.pop_front();
      pending = true;
    }
  }
  // Receives first: their data sends were posted up front everywhere, while
  // a send completes only once its receiver has checked the header and
  // posted the data's receive.
  for (InterHost::Posted& op : remote) {
    if (!op.is_send) keep(inter_->finish(op));
  }
  for (InterHost::Posted& op : remote) {
    if (op.is_send) keep(inter_->finish(op));
  }
  return first;
}

}  // namespace torchneuron
