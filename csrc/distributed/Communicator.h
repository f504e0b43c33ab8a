// The collectives of one process group on raw buffers, whichever way its
// ranks are placed: on one host a neuroncoll group of all ranks (shared
// memory); on several hosts a neuroncoll group per host and gloo between
// hosts (InterHost.h). The calls are neuroncoll::Group's, in the group's
// ranks, and return its Status values. Used by one thread at a time (the
// process group's queue), except abort(); point-to-point messages move on
// threads of their own (post()).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>

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

  // Point to point without waiting (send, recv, batch_isend_irecv): `done`
  // runs once the message ended, on the thread that moved it (at once on
  // the caller's when it cannot be posted). In order per peer and direction;
  // no message waits for another of this rank to end, so ranks may post
  // sends and receives of any size in any order. With ranks of this host,
  // messages move through neuroncoll's channels chunk by chunk, all of them
  // together, on the group's progress thread (Group::progress); with other
  // hosts through gloo, posted at once and finished in order by a thread per
  // peer and direction.
  struct P2P {
    bool is_send;
    void* data;
    size_t count;
    DType dtype;
    int peer, tag;
  };
  using Done = std::function<void(Status)>;
  void post(const P2P& op, Done done);
  // Waits until every posted message ended (each within the timeout, or at
  // abort()). Every collective calls it first, so messages and collectives
  // keep the order they were issued in.
  void drain();
  // Whether a posted message has not ended yet (drain() would wait).
  bool messages_in_flight();

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

  // Point to point (post()).
  class Lane;  // a thread running one peer's gloo finishes of one direction in order
  void post_remote(const P2P& op, Done done);
  void progress_loop();    // the progress thread: moves local_'s posted messages
  void ended(size_t n);    // n messages ended (their `done` has run)
  std::mutex p2p_mu_;      // local_'s point-to-point calls and the state below
  std::condition_variable p2p_cv_;  // a post (for the idle progress thread), the last end (drain)
  std::unordered_map<uint64_t, Done> local_posted_;  // by neuroncoll's message id
  size_t in_flight_ = 0;   // posted messages not ended, of both kinds
  bool stopping_ = false;
  std::thread progress_;   // started at the first message with a rank of this host
  std::map<std::pair<int, bool>, std::unique_ptr<Lane>> lanes_;  // (peer, is_send)
};

}  // namespace torchneuron
