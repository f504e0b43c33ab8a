// InterHost's agreement round, its gloo plumbing and point to point between
// hosts. See InterHost.h.
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstring>

#include "csrc/distributed/InterHost.h"

namespace torchneuron {

using neuroncoll::Code;
using neuroncoll::Status;

// What one rank says it is calling; sent as bytes, the same size everywhere.
struct InterHost::Call {
  uint64_t seq = 0;
  uint64_t count = 0;
  char kind[24] = {};  // the collective's name
  uint32_t dtype = 0, op = 0, uses_op = 0;
  int32_t root = -1;
  uint32_t invalid = 0;
  char message[200] = {};
};

InterHost::InterHost(neuroncoll::Group& local, const HostTopology& topology,
                     InterHostGroups groups, std::chrono::milliseconds timeout, std::string name)
    : local_(local),
      topo_(topology),
      groups_(std::move(groups)),
      timeout_(timeout),
      name_(std::move(name)),
      rank_(topology.rank),
      size_(static_cast<int>(topology.host_of.size())) {
  TORCH_CHECK(groups_.all && groups_.control && (groups_.leaders || !topology.is_leader()),
              "ProcessGroupNeuron: a group on several hosts needs its gloo groups");
}

std::string InterHost::describe(const Call& c) const {
  std::string s = std::string(c.kind, strnlen(c.kind, sizeof(c.kind))) + " " +
                  neuroncoll::dtype_name(static_cast<DType>(c.dtype));
  if (c.uses_op) s += std::string(" ") + neuroncoll::reduce_op_name(static_cast<ReduceOp>(c.op));
  s += " count " + std::to_string(c.count);
  if (c.root >= 0) s += " root " + std::to_string(c.root);
  return s + " (collective #" + std::to_string(c.seq) + ")";
}

void InterHost::abort() {
  aborted_.store(true);
  std::lock_guard<std::mutex> lock(inflight_mu_);
  for (const auto& w : inflight_) w->abort();
}

void InterHost::track(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  inflight_.push_back(work);
  if (aborted_.load()) work->abort();
}

void InterHost::untrack(const c10::intrusive_ptr<c10d::Work>& work) {
  std::lock_guard<std::mutex> lock(inflight_mu_);
  std::erase(inflight_, work);
}

Status InterHost::begin(const char* what) const {
  if (aborted_.load()) {
    return {Code::kAborted, std::string(what) + ": group '" + name_ + "' was aborted"};
  }
  std::lock_guard<std::mutex> lock(broken_mu_);
  if (broken_.ok()) return {};
  return {Code::kAborted, std::string(what) + ": group '" + name_ +
                              "' failed earlier and is unusable: " + broken_.to_string()};
}

Status InterHost::gloo_step(const char* what, const std::function<void()>& body) {
  std::string error;
  try {
    body();
    if (!aborted_.load()) return {};
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (aborted_.load()) {
    return set_broken(Status(Code::kAborted, std::string(what) + " (group '" + name_ + "', rank " +
                                                 std::to_string(rank_) + "): the group was aborted"));
  }
  const bool timed = error.find("imed out") != std::string::npos;
  return set_broken(Status(timed ? Code::kTimeout : Code::kSystemError,
                           std::string(what) + " between hosts (group '" + name_ + "', rank " +
                               std::to_string(rank_) + ", collective #" + std::to_string(seq_ - 1) +
                               ", gloo): " + error.substr(0, 600)));
}

Status InterHost::set_broken(Status status) {
  std::lock_guard<std::mutex> lock(broken_mu_);
  broken_ = status;
  return status;
}

Status InterHost::exchange(const std::string& mine, std::vector<std::string>* all,
                           const char* what) {
  const int64_t n = static_cast<int64_t>(mine.size());
  all->assign(size_, std::string());
  (*all)[rank_] = mine;
  at::Tensor out = at::empty({n}, at::kByte);
  std::memcpy(out.data_ptr(), mine.data(), mine.size());
  std::vector<at::Tensor> in(size_);
  std::vector<c10::intrusive_ptr<c10d::Work>> recvs(size_), sends(size_);
  struct Untrack {
    InterHost* self;
    std::vector<c10::intrusive_ptr<c10d::Work>>& recvs;
    std::vector<c10::intrusive_ptr<c10d::Work>>& sends;
    ~Untrack() {
      for (auto* works : {&recvs, &sends}) {
        for (const auto& w : *works) {
          if (w) self->untrack(w);
        }
      }
    }
  } untrack{this, recvs, sends};
  std::string missing, first_error;
  std::vector<bool> is_lost(size_, false);
  auto lost = [&](int p, const std::exception& e) {
    if (is_lost[p]) return;
    is_lost[p] = true;
    missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    if (first_error.empty()) first_error = e.what();
  };
  // Posting to a peer whose connection has already closed (it exited) throws
  // at once: that peer is a lost rank, named as one that never answers.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    try {
      in[p] = at::empty({n}, at::kByte);
      std::vector<at::Tensor> r{in[p]}, s{out};
      recvs[p] = groups_.control->recv(r, p, 0);
      track(recvs[p]);
      sends[p] = groups_.control->send(s, p, 0);
      track(sends[p]);
    } catch (const std::exception& e) {
      lost(p, e);
    }
  }
  // One deadline for the whole round: ranks that did not send in time are
  // the missing ones.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now()));
  };
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || is_lost[p]) continue;
    try {
      recvs[p]->wait(left());
      (*all)[p].assign(static_cast<const char*>(in[p].data_ptr()), static_cast<size_t>(n));
    } catch (const std::exception& e) {
      lost(p, e);
    }
  }
  for (int p = 0; p < size_ && missing.empty(); ++p) {
    if (p == rank_) continue;
    try {
      sends[p]->wait(left());
    } catch (const std::exception& e) {
      lost(p, e);
    }
  }
  if (aborted_.load()) {
    return set_broken(Status(Code::kAborted, std::string(what) + " (group '" + name_ + "', rank " +
                                                 std::to_string(rank_) + "): the group was aborted"));
  }
  if (missing.empty()) return {};
  const bool timed = first_error.find("imed out") != std::string::npos;
  return set_broken(Status(timed ? Code::kTimeout : Code::kSystemError,
                   std::string(what) + " (group '" + name_ + "', rank " + std::to_string(rank_) +
                       ", collective #" + std::to_string(seq_ - 1) + "): " +
                       (timed ? "timed out after " + std::to_string(timeout_.count()) +
                                    " ms waiting for rank(s) " + missing +
                                    " (not arrived: dead, hung, or calling another collective)"
                              : "lost rank(s) " + missing + " between hosts") +
                       "; gloo: " + first_error.substr(0, 300)));
}

Status InterHost::agree(const char* what, DType dtype, size_t count, int root,
                        const ReduceOp* op) {
  NEURONCOLL_RETURN_IF_ERROR(begin(what));
  Call call;
  call.seq = seq_++;
  std::snprintf(call.kind, sizeof(call.kind), "%s", what);
  call.dtype = static_cast<uint32_t>(dtype);
  call.count = count;
  call.root = root;
  if (op) {
    call.uses_op = 1;
    call.op = static_cast<uint32_t>(*op);
  }
  std::string problem;
  if (op && !neuroncoll::op_supported(dtype, *op)) {
    problem = std::string("op ") + neuroncoll::reduce_op_name(*op) + " is not defined for dtype " +
              neuroncoll::dtype_name(dtype);
  } else if (root >= size_ || root < -1) {
    problem = "root " + std::to_string(root) + " outside a group of size " + std::to_string(size_);
  }
  if (!problem.empty()) {
    call.invalid = 1;
    std::snprintf(call.message, sizeof(call.message), "%s", problem.c_str());
  }
  std::vector<std::string> all;
  NEURONCOLL_RETURN_IF_ERROR(exchange(std::string(reinterpret_cast<const char*>(&call), sizeof(call)),
                                      &all, what));
  std::vector<Call> calls(size_);
  for (int p = 0; p < size_; ++p) std::memcpy(&calls[p], all[p].data(), sizeof(Call));
  std::string invalid;
  bool differ = false;
  for (int p = 0; p < size_; ++p) {
    const Call& c = calls[p];
    if (c.invalid) invalid += (invalid.empty() ? "rank " : "; rank ") + std::to_string(p) + ": " + c.message;
    const Call& c0 = calls[0];
    differ = differ || c.seq != c0.seq || std::strncmp(c.kind, c0.kind, sizeof(c.kind)) != 0 ||
             c.dtype != c0.dtype ||
             c.uses_op != c0.uses_op || (c.uses_op && c.op != c0.op) || c.count != c0.count ||
             c.root != c0.root;
  }
  if (call.invalid) return {Code::kInvalidArgument, std::string(what) + ": " + call.message};
  if (!invalid.empty()) {
    return {Code::kPeerError, std::string(what) + ": invalid arguments on " + invalid};
  }
  if (!differ) return {};
  std::string m = std::string(what) + " (group '" + name_ +
                  "'): ranks called different collectives or arguments:";
  for (int p = 0; p < size_; ++p) {
    m += std::string(p ? "; " : " ") + "rank " + std::to_string(p) + ": " + describe(calls[p]);
  }
  return {Code::kMismatch, m};
}

Status InterHost::barrier() { return agree("barrier", DType::kUInt8, 0, -1, nullptr); }

// ---- point to point between hosts -----------------------------------------

namespace {

// Headers travel on a tag of their own, so that a receiver learns the
// sender's tag even when it differs from the one it expects.
constexpr int kHeaderTag = 0x7fffffff;

at::Tensor bytes_of(void* buffer, size_t count, neuroncoll::DType dtype) {
  return at::from_blob(buffer, {static_cast<int64_t>(count * neuroncoll::dtype_size(dtype))},
                       at::kByte);
}

neuroncoll::DType header_dtype(int64_t v) {
  return static_cast<neuroncoll::DType>(std::clamp<int64_t>(v, 0, neuroncoll::kNumDTypes - 1));
}

}  // namespace

InterHost::Posted InterHost::post(bool is_send, void* buffer, size_t count, DType dtype, int peer,
                                  int tag) {
  Posted op{is_send, peer, tag, count, dtype, buffer, at::empty({3}, at::kLong), {}, {}};
  int64_t* h = op.header.data_ptr<int64_t>();
  h[0] = static_cast<int64_t>(count);
  h[1] = static_cast<int64_t>(dtype);
  h[2] = tag;
  std::vector<at::Tensor> header{op.header};
  std::lock_guard<std::mutex> lock(post_mu_);
  if (is_send) {
    std::vector<at::Tensor> data{bytes_of(buffer, count, dtype)};
    op.header_work = groups_.all->send(header, peer, kHeaderTag);
    op.data_work = groups_.all->send(data, peer, tag);
    track(op.data_work);
  } else {
    op.header_work = groups_.all->recv(header, peer, kHeaderTag);  // the data after the check
  }
  track(op.header_work);
  return op;
}

Status InterHost::finish(Posted& op) {
  const std::string what = std::string(op.is_send ? "send to" : "recv from") + " rank " +
                           std::to_string(op.peer) + " (another host)";
  Status verdict;
  struct Untrack {
    InterHost* self;
    Posted& op;
    ~Untrack() {
      self->untrack(op.header_work);
      if (op.data_work) self->untrack(op.data_work);
    }
  } untrack{this, op};
  Status s = gloo_step(what.c_str(), [&] {
    op.header_work->wait(timeout_);
    if (op.is_send) {
      op.data_work->wait(timeout_);
      return;
    }
    if (aborted_.load()) return;  // an interrupted wait leaves the header unset
    const int64_t* h = op.header.data_ptr<int64_t>();
    const bool match = h[0] == static_cast<int64_t>(op.count) &&
                       h[1] == static_cast<int64_t>(op.dtype) && h[2] == op.tag;
    // A refused message is still taken off the wire, into scratch memory.
    std::vector<at::Tensor> data{
        match ? bytes_of(op.buffer, op.count, op.dtype)
              : at::empty({h[0] * static_cast<int64_t>(neuroncoll::dtype_size(header_dtype(h[1])))},
                          at::kByte)};
    {
      std::lock_guard<std::mutex> lock(post_mu_);
      op.data_work = groups_.all->recv(data, op.peer, static_cast<int>(h[2]));
    }
    track(op.data_work);
    op.data_work->wait(timeout_);
    if (!match) {
      verdict = Status(Code::kMismatch,
                       what + ": expected " + std::to_string(op.count) + " " +
                           neuroncoll::dtype_name(op.dtype) + " with tag " +
                           std::to_string(op.tag) + ", rank " + std::to_string(op.peer) +
                           " sent " + std::to_string(h[0]) + " " +
                           neuroncoll::dtype_name(header_dtype(h[1])) + " with tag " +
                           std::to_string(h[2]));
    }
  });
  return s.ok() ? verdict : s;
}

}  // namespace torchneuron
