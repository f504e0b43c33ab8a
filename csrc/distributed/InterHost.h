// The collectives of a group whose ranks are on several hosts, hierarchical:
// shared memory among the ranks of a host (neuroncoll, the `local` group),
// gloo over TCP between hosts, on CPU views of the device buffers (gloo
// refuses neuron tensors; the views share the memory, no copy).
//
// Every collective starts with an agreement round among all ranks (each
// sends its call's descriptor to every peer through the `control` gloo
// group): ranks that disagree all get kMismatch listing every rank's call,
// a rank that does not arrive within the timeout is named in a kTimeout on
// every rank that waited for it. Then:
//   all_reduce: reduce to the host's first rank (its leader) over shared
//     memory, all_reduce among leaders through gloo, broadcast over shared
//     memory. AVG and PREMUL_SUM are ours (sums through gloo, the scaling
//     here); float16/bfloat16 cross hosts as float32, int16 as int32, bool
//     as uint8 (gloo has no such kernels or would round each step).
//   broadcast: inside the root's host, between leaders, inside the others.
//   all_gather: gathered per host to its leader, all-gathered between
//     leaders, broadcast per host. reduce and reduce_scatter: an all_reduce.
//   gather, scatter, all_to_all: gloo among all ranks (bytes).
//   send/recv: shared memory inside a host; across hosts a header (count,
//     dtype, tag) then the data over gloo, so a mismatch names both sides.
// A leader whose gloo step fails tells its host's ranks (neuroncoll's
// Group::fail), so they fail with its message instead of waiting for it.
// After a timeout or a failure between hosts the group is broken: later
// collectives fail at once (kAborted).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "csrc/distributed/HostTopology.h"
#include "neuroncoll/group.hpp"

namespace torchneuron {

// The gloo groups the hierarchical path uses (created by the Python layer,
// which knows how torch configures gloo: GLOO_SOCKET_IFNAME, hostnames).
struct InterHostGroups {
  c10::intrusive_ptr<c10d::Backend> all;      // every rank: data of gather, scatter, all_to_all, p2p
  c10::intrusive_ptr<c10d::Backend> control;  // every rank: agreement rounds
  c10::intrusive_ptr<c10d::Backend> leaders;  // the first rank of each host (null elsewhere)
};

class InterHost {
 public:
  using Status = neuroncoll::Status;
  using DType = neuroncoll::DType;
  using ReduceOp = neuroncoll::ReduceOp;

  InterHost(neuroncoll::Group& local, const HostTopology& topology, InterHostGroups groups,
            std::chrono::milliseconds timeout, std::string name);

  Status all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, double factor);
  Status broadcast(void* buffer, size_t count, DType dtype, int root);
  Status reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                double factor);
  Status all_gather(const void* in, void* out, size_t count, DType dtype);
  Status reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                        double factor);
  Status gather(const void* in, void* out, size_t count, DType dtype, int root);
  Status scatter(const void* in, void* out, size_t count, DType dtype, int root);
  Status all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                    std::span<const size_t> recv_counts, DType dtype);
  Status barrier();

  // Point to point with a rank on another host. A posted operation runs in
  // the background until finish() (batches post every remote operation
  // first, so that ranks sending to each other cannot block).
  struct Posted {
    bool is_send;
    int peer, tag;
    size_t count;
    DType dtype;
    void* buffer;
    at::Tensor header;  // count, dtype, tag: sent, or the received one
    c10::intrusive_ptr<c10d::Work> header_work, data_work;
  };
  // post() and finish() may run on several threads at once (finish() of
  // different peers' messages; a message's finish() after its post()).
  Posted post(bool is_send, void* buffer, size_t count, DType dtype, int peer, int tag);
  Status finish(Posted& op);

  // From any thread: point-to-point waits (agreement rounds, send/recv) end
  // at once, everything later fails with kAborted. gloo collectives cannot
  // be interrupted: they end at their timeout.
  void abort();

 private:
  struct Call;

  // The agreement round (InterHostAgreement.cpp) of the collective `what`
  // (its name); checks this rank's own arguments first.
  Status agree(const char* what, DType dtype, size_t count, int root, const ReduceOp* op);
  // Every rank's `mine` (same size everywhere) through the control group.
  Status exchange(const std::string& mine, std::vector<std::string>* all, const char* what);
  std::string describe(const Call& c) const;
  // Runs gloo calls; an exception becomes a failed Status (and breaks the group).
  Status gloo_step(const char* what, const std::function<void()>& body);
  // Records the error that breaks the group; returns it.
  Status set_broken(Status status);
  Status begin(const char* what) const;
  // Point-to-point works in flight, which abort() interrupts.
  void track(const c10::intrusive_ptr<c10d::Work>& work);
  void untrack(const c10::intrusive_ptr<c10d::Work>& work);

  // The inter-host half of all_reduce on a leader: `data` in place.
  void leaders_all_reduce(void* data, size_t count, DType dtype, ReduceOp op);
  // On a leader: runs `step` (gloo), then `after` over shared memory; if the
  // step failed, tells the host's ranks instead.
  Status leader_then_local(const char* what, const std::function<void()>& step,
                           const std::function<Status()>& after);

  neuroncoll::Group& local_;
  const HostTopology& topo_;
  InterHostGroups groups_;
  std::chrono::milliseconds timeout_;
  std::string name_;
  int rank_, size_;
  uint64_t seq_ = 0;
  mutable std::mutex broken_mu_;
  Status broken_;  // guarded by broken_mu_ (point-to-point finishes run on several threads)
  std::mutex post_mu_;  // gloo send/recv posts, from several threads
  std::atomic<bool> aborted_{false};
  std::mutex inflight_mu_;
  std::vector<c10::intrusive_ptr<c10d::Work>> inflight_;  // guarded by inflight_mu_
};

}  // namespace torchneuron
