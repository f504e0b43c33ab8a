// A group of ranks on one host and the collectives it runs. This is the API
// the torch layer's c10d backend calls: raw pointers, element counts, a dtype
// and an op; results are Status values.
//
// Every rank of a group must call the same collectives in the same order.
// Each collective first exchanges a small descriptor (kind, dtype, op, counts,
// root), so ranks that disagree all get kMismatch naming the ranks and values,
// and the group stays usable. A peer that does not arrive within the timeout
// gives kTimeout naming the missing ranks; the group is then broken and every
// later call returns kAborted.
//
// A Group is used by one thread at a time, except abort().
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "neuroncoll/status.hpp"
#include "neuroncoll/store.hpp"
#include "neuroncoll/types.hpp"

namespace neuroncoll {

struct GroupOptions {
  std::shared_ptr<Store> store;  // shared by every rank of the group
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{30000};  // bound of every wait
  std::string name = "default";  // unique among the groups sharing a store
  // Per-rank staging memory for buffers peers cannot read directly.
  size_t staging_bytes = 1 << 20;
  // All-reduces up to this size read every peer's data and reduce locally
  // (one round); larger ones reduce-scatter and all-gather in chunks.
  size_t small_message_bytes = 64 << 10;
  // How messages name the ranks (e.g. their ranks in a larger job whose
  // ranks on this host form the group); empty: by their index here.
  std::vector<int> rank_labels;
};

// How this rank's collectives ran so far (for profiling and tests).
struct GroupStats {
  uint64_t collectives = 0;
  uint64_t small_all_reduces = 0;    // one round, reduced locally from staging
  uint64_t chunked_all_reduces = 0;  // reduce-scatter + all-gather through staging
  uint64_t direct_all_reduces = 0;   // read straight from peers' arenas
  uint64_t direct_broadcasts = 0;    // copied straight from the root's arena
  uint64_t direct_all_gathers = 0;   // copied straight from peers' arenas
  uint64_t direct_reduce_scatters = 0;  // reduced straight from peers' arenas
};

class Group {
 public:
  static Status create(const GroupOptions& options, std::unique_ptr<Group>* group);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;
  GroupStats stats() const;

  // out[i] = in_0[i] op in_1[i] op ... in rank order, identical on every rank.
  // `in` may equal `out`. `premul_factor` is this rank's factor of kPremulSum.
  Status all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                    double premul_factor = 1.0);
  // The root's `count` elements into every rank's `buffer`.
  Status broadcast(void* buffer, size_t count, DType dtype, int root);
  // The all_reduce result on `root` only (`out` is ignored elsewhere).
  Status reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                double premul_factor = 1.0);
  // out (size * count elements) = every rank's `count` elements in rank order.
  Status all_gather(const void* in, void* out, size_t count, DType dtype);
  // in has size * count elements; rank r gets the reduction of block r.
  Status reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                        double premul_factor = 1.0);
  // Like all_gather with the result on `root` only.
  Status gather(const void* in, void* out, size_t count, DType dtype, int root);
  // Block r of the root's size * count elements to rank r.
  Status scatter(const void* in, void* out, size_t count, DType dtype, int root);
  // send_counts[q] elements (consecutive blocks of `in`) to rank q;
  // recv_counts[p] elements from rank p into consecutive blocks of `out`.
  // recv_counts[p] here must equal send_counts[rank()] on rank p.
  Status all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                    std::span<const size_t> recv_counts, DType dtype);
  Status barrier();
  // Takes part in the peers' current collective only to fail it: each peer's
  // call returns kPeerError naming this rank and `message` (a rank that
  // failed elsewhere, e.g. between hosts, tells the ranks waiting for it).
  // Returns the peers' verdict round's status (ok: they were told).
  Status fail(const std::string& message);
  // From any thread: the collective this group is waiting in (if any) and
  // every later call return kAborted (a wait notices within 20 ms). The
  // group stays unusable; peers are not told (they time out, or abort too).
  void abort();

  // Point to point, in order per (sender, receiver) pair; `tag`, `count` and
  // `dtype` must match the peer's call (the receiver returns kMismatch, the
  // sender learns of it as kPeerError within a long send, or at its next
  // send to that peer, which is then not made). A message moves through a
  // 64 KiB channel per ordered pair, one chunk in flight: a send ends once
  // its last chunk is in the channel, so ranks may send short messages to
  // each other first. send/recv are isend/irecv and a wait for that message.
  Status send(const void* buffer, size_t count, DType dtype, int peer, int tag = 0);
  Status recv(void* buffer, size_t count, DType dtype, int peer, int tag = 0);

  // Non-blocking point to point. isend/irecv post a message behind the
  // earlier ones of its peer and direction and give its id; progress() moves
  // every posted message as far as the channels allow without waiting, all
  // peers and both directions together, and appends those that ended to
  // `done` (also those a send/recv call moved to their end). Ranks may post
  // in any order and any size: no message waits for another of this rank
  // to end. A message that does not move for the group's timeout ends in
  // kTimeout (the group is broken), after abort() in kAborted. Buffers must
  // stay valid until the message ended; messages must have ended before a
  // collective is called.
  struct Completion {
    uint64_t id;
    Status status;
  };
  Status isend(const void* buffer, size_t count, DType dtype, int peer, int tag, uint64_t* id);
  Status irecv(void* buffer, size_t count, DType dtype, int peer, int tag, uint64_t* id);
  // Returns how many posted messages have not ended.
  size_t progress(std::vector<Completion>* done);
  // Sleeps until a peer moved a channel of this rank since the last
  // progress(), wake() was called, `until`, a posted message's timeout, or
  // abort(). Both may run on another thread beside the other calls (a
  // progress thread sleeps here while the caller posts, then wakes it).
  void wait_for_peers(std::chrono::steady_clock::time_point until);
  void wake();

  struct Impl;

 private:
  explicit Group(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// How this host is told apart from others: hostname, boot id and network
// namespace (ranks in different network namespaces of one machine share
// /dev/shm but are treated as different hosts).
std::string local_host_id();

}  // namespace neuroncoll
