// Group::Impl: the shared control segment of a group and the round protocol
// every collective is built from.
//
// Segment: a header, one slot per rank (its progress flag, its descriptor of
// the current collective) and one staging buffer per rank. A rank publishes
// progress as a step counter: a *round* posts the next step and waits until
// every peer posted it (a barrier that also publishes whatever the rank wrote
// before it); a *release* posts a step without waiting, saying "I finished
// reading your slots and staging". A rank rewrites its own slot or staging
// only after every peer reached its last release (`acquire`), so the wait for
// slow readers is paid at the next write, usually when it has already passed.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "neuroncoll/group.hpp"
#include "transport/arena_registry.hpp"
#include "transport/flag_wait.hpp"
#include "transport/shm_segment.hpp"

namespace neuroncoll {

enum class Kind : uint32_t {
  kCreate, kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kGather, kScatter,
  kAllToAll, kBarrier, kDirectCheck,
};
const char* kind_name(Kind kind);

// Descriptor::invalid: the rank found its own arguments invalid, or it only
// reports a failure (Group::fail).
inline constexpr uint32_t kInvalidArgs = 1, kFailed = 2;

// What one rank says it is calling; compared across ranks before any data is used.
struct Descriptor {
  uint64_t seq = 0;  // collectives issued on this group so far
  Kind kind = Kind::kBarrier;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool uses_op = false;
  int32_t root = -1;
  uint64_t count = 0;
  double scale = 1.0;               // this rank's PREMUL_SUM factor
  transport::ArenaRef in, out;      // where this rank's buffers live, if in an arena
  uint32_t invalid = 0;             // kInvalidArgs or kFailed: this rank's call fails
  char message[200] = {};           // ... and why
};

struct alignas(64) RankSlot {
  transport::Flag flag;
  // Rung by a peer that moved a point-to-point channel to or from this rank
  // (and by Group::wake): what a rank with posted messages sleeps on.
  transport::Flag bell;
  Descriptor desc;
  // check_direct's verdict (apart from `desc`, which peers may still read).
  uint32_t direct_failed = 0;
  char direct_message[200] = {};
};

// One direction of a point-to-point link (sender -> receiver), followed in
// the segment by kChannelBytes of data. The sender posts `sent` per chunk,
// the receiver `acked`; `refused` carries the receiver's mismatch verdict
// back to the sender's next send.
inline constexpr size_t kChannelBytes = 64 << 10;
struct alignas(64) Channel {
  transport::Flag sent;
  transport::Flag acked;
  uint64_t count;       // elements of the message
  uint32_t dtype;
  int32_t tag;
  uint64_t chunk;       // index of this chunk
  uint64_t chunks;      // of the message
  uint32_t refused;     // set by the receiver, cleared by the sender
  char message[200];
};

struct alignas(64) SegmentHeader {
  uint64_t magic;
  uint32_t size;
  uint32_t reserved;
  uint64_t staging_bytes;
  uint64_t small_message_bytes;
};

struct Group::Impl {
  GroupOptions options;
  transport::ShmSegment segment;
  SegmentHeader* header = nullptr;
  RankSlot* slots = nullptr;
  char* staging_base = nullptr;
  size_t staging_bytes = 0;
  size_t small_message_bytes = 0;
  uint32_t step = 0;
  bool pending_release = false;
  uint64_t seq = 0;
  Status broken;  // first timeout; later calls return kAborted
  std::atomic<bool> aborted{false};  // Group::abort(), from any thread
  transport::PeerArenas arenas;
  GroupStats stats;

  int rank() const { return options.rank; }
  int size() const { return options.size; }
  RankSlot& slot(int r) { return slots[r]; }
  char* staging(int r) { return staging_base + static_cast<size_t>(r) * staging_bytes; }
  // Point-to-point channels, after the staging buffers.
  Channel& channel(int from, int to) {
    char* base = staging_base + static_cast<size_t>(size()) * staging_bytes;
    return *reinterpret_cast<Channel*>(base + (static_cast<size_t>(from) * size() + to) *
                                                  (sizeof(Channel) + kChannelBytes));
  }
  char* channel_data(int from, int to) {
    return reinterpret_cast<char*>(&channel(from, to)) + sizeof(Channel);
  }
  std::vector<uint32_t> sent_chunks, received_chunks;  // per peer

  // Posted point-to-point messages (point_to_point.cpp).
  struct Message {
    uint64_t id;
    bool is_send;
    char* buffer;
    size_t count;
    DType dtype;
    int peer, tag;
    size_t chunk = 0;  // the next one
    Status status;     // a refusal or a mismatch, returned when it ends
    std::chrono::steady_clock::time_point since;  // last move, or reaching the head
  };
  std::vector<std::deque<Message>> sends, recvs;  // per peer, in post order
  std::vector<Group::Completion> ended;           // not handed out yet
  uint64_t next_message = 0;
  size_t posted = 0;
  std::atomic<uint32_t> bell_seen{0};  // this rank's bell when progress() last looked
  // The first head message's timeout, for wait_for_peers() on another thread.
  std::atomic<int64_t> next_timeout{std::numeric_limits<int64_t>::max()};
  Status post(bool is_send, const void* buffer, size_t count, DType dtype, int peer, int tag,
              uint64_t* id);
  // One chunk of a head message if its channel allows; *done at its end.
  bool send_step(Message& m, bool* done);
  bool recv_step(Message& m, bool* done);
  void progress();
  // Ends every posted message: a head that did not move in time (or after
  // abort()) with `stopped_waiting`, the others as the broken group's.
  void fail_posted();
  void wait_for_peers(std::chrono::steady_clock::time_point until);
  Status wait_message(uint64_t id);

  // Protocol steps (see the file comment). `what` names the collective in errors.
  Status round(const char* what);
  void release();
  Status acquire(const char* what);
  Status wait_all(uint32_t target, const char* what);

  // Starts a collective: acquire, `write(0)` into own staging, descriptor
  // round, agreement check; then `read(0)`, release, and for k = 1..rounds-1
  // acquire, write(k), round, read(k), release. `write`/`read` see validated
  // peers' descriptors. On any failure every rank returns an error.
  Status run(Descriptor desc, size_t rounds, const std::function<void(size_t)>& write,
             const std::function<Status(size_t)>& read);
  // Rounds k = first..rounds-1 of acquire, write(k), round, read(k), release
  // (what run() does after the descriptor round).
  Status staged_rounds(size_t first, size_t rounds, const std::function<void(size_t)>& write,
                       const std::function<Status(size_t)>& read, const char* what);
  // The descriptor round alone (caller did acquire and its writes).
  Status exchange(Descriptor& desc);
  // Every rank checks it can map the arena buffers every peer described;
  // agreed by a round. If any rank cannot, *usable is false on every rank,
  // the group stops offering its arenas (direct_off) and the collective goes
  // on through staging; a failed round is the error returned.
  Status check_direct(const char* what, std::vector<char*>* in, std::vector<char*>* out,
                      bool* usable);
  // Set once any rank could not map a peer's arena (e.g. another pid
  // namespace): later collectives use staging. Agreed by every rank.
  bool direct_off = false;
  // Where this rank's buffer lives, if peers may read it there.
  transport::ArenaRef arena_of(const void* ptr, size_t bytes) const {
    return direct_off ? transport::ArenaRef() : transport::find_arena(ptr, bytes);
  }

  // out[0, count) = reduction, in rank order, of every rank's staging at
  // `offset` (with each rank's PREMUL_SUM factor).
  // `own`, if given, is this rank's source in place of its staging.
  void reduce_staged(const Descriptor& d, size_t offset, void* out, size_t count,
                     const void* own = nullptr);

  Status begin(const char* what);  // aborted group check
  // A wait ended without its peers: by Group::abort(), else by the timeout.
  // Breaks the group; `waiting_for` names the peers.
  Status stopped_waiting(const char* what, const std::string& waiting_for);
  Status invalid(Descriptor& desc, const std::string& message);
  std::string describe(const Descriptor& d) const;
  // "rank <label>" of rank index `r` (GroupOptions::rank_labels).
  std::string who(int r) const;
  std::string who_list(const std::vector<int>& ranks) const;

  // Collectives (src/algorithms/).
  Status all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, double scale);
  Status reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                double scale);
  Status reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                        double scale);
  Status broadcast(void* buffer, size_t count, DType dtype, int root);
  Status all_gather(const void* in, void* out, size_t count, DType dtype);
  Status gather(const void* in, void* out, size_t count, DType dtype, int root);
  Status gather_to(Kind kind, const void* in, void* out, size_t count, DType dtype, int root);
  Status scatter(const void* in, void* out, size_t count, DType dtype, int root);
  Status all_to_all(const void* in, const size_t* send_counts, void* out,
                    const size_t* recv_counts, DType dtype);
  Status send(const void* buffer, size_t count, DType dtype, int peer, int tag);
  Status recv(void* buffer, size_t count, DType dtype, int peer, int tag);
};

// [begin, end) of part `r` of `n` of `count` elements, cut at 64-byte units.
void slice_of(size_t count, size_t elem_size, int n, int r, size_t* begin, size_t* end);

}  // namespace neuroncoll
