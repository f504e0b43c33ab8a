// The collectives of one process group on raw buffers, whichever way its
// ranks are placed: on one host a neuroncoll group of all ranks (shared
// memory); on several hosts a neuroncoll group per host and gloo between
// hosts (InterHost.h). The calls are neuroncoll::Group's, in the group's
// ranks, and return its Status values. Used by one thread at a time (the
// process group's queue), except abort().
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <span>
#include <string>

#include "csrc/distributed/HostTopology.h"
#include "csrc/distributed/InterHost.h"
#include "neuroncoll/group.hpp"

namespace torchneuron {

class Communicator {
 public:
  using Status = neuroncoll::Status;
  using DType = neuroncoll::DType;
  using ReduceOp = neuroncoll::ReduceOp;

  // `groups` is empty when the topology has one host.
  Communicator(const c10::intrusive_ptr<c10d::Store>& store, HostTopology topology,
               std::chrono::milliseconds timeout, const std::string& name, InterHostGroups groups);
  ~Communicator();

  int rank() const { return topo_.rank; }
  int size() const { return static_cast<int>(topo_.host_of.size()); }
  const HostTopology& topology() const { return topo_; }
  // This host's shared-memory collectives so far.
  neuroncoll::GroupStats stats() const { return local_->stats(); }

  Status all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                    double premul_factor = 1.0);
  Status broadcast(void* buffer, size_t count, DType dtype, int root);
  Status reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                double premul_factor = 1.0);
  Status all_gather(const void* in, void* out, size_t count, DType dtype);
  Status reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                        double premul_factor = 1.0);
  Status gather(const void* in, void* out, size_t count, DType dtype, int root);
  Status scatter(const void* in, void* out, size_t count, DType dtype, int root);
  Status all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                    std::span<const size_t> recv_counts, DType dtype);
  Status barrier();
  Status send(const void* buffer, size_t count, DType dtype, int peer, int tag = 0);
  Status recv(void* buffer, size_t count, DType dtype, int peer, int tag = 0);

  // Sends and receives that complete together whatever their sizes, also
  // when ranks send to each other (batch_isend_irecv).
  struct P2P {
    bool is_send;
    void* data;
    size_t count;
    DType dtype;
    int peer, tag;
  };
  Status p2p_batch(std::span<const P2P> ops);

  // Takes part in the peers' current collective only to fail it with
  // `message` (neuroncoll's Group::fail): a rank that cannot run its part
  // tells the ranks waiting for it at once. Between hosts only this host's
  // ranks are told; the others end at the group's timeout.
  Status fail(const std::string& message);

  // From any thread: the collective running (if any) and every later call
  // fail with kAborted; waits in shared memory and gloo's point-to-point
  // waits notice at once, a gloo collective between hosts at its timeout.
  void abort();

 private:
  HostTopology topo_;
  std::unique_ptr<neuroncoll::Group> local_;  // this host's ranks
  std::unique_ptr<InterHost> inter_;          // null on one host
};

}  // namespace torchneuron
