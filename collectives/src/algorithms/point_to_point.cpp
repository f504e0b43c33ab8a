// send / recv over the per-pair channels of the segment. A message goes in
// chunks of the channel's size; the sender writes a chunk once the receiver
// acknowledged the previous one, so one chunk is in flight per direction.
// Messages are posted and moved by progress(), one chunk per head message
// and pass, never waiting on one channel: a rank whose send waits for its
// peer to receive still takes that peer's chunks, so ranks sending long
// messages to each other (or around a ring) cannot block one another. A
// rank with nothing to do sleeps on its bell, which peers ring at each move.
#include <string>

#include "common.hpp"

namespace neuroncoll {

using algorithms::copy_bytes;

namespace {

Status check_args(const Group::Impl& g, int peer, DType dtype, size_t count, const void* buffer,
                  const char* what) {
  if (peer < 0 || peer >= g.size() || peer == g.rank()) {
    return {Code::kInvalidArgument, std::string(what) + ": peer " + std::to_string(peer) +
                                        " is not another rank of a group of size " +
                                        std::to_string(g.size())};
  }
  if (static_cast<int>(dtype) >= kNumDTypes) return {Code::kInvalidArgument, std::string(what) + ": unknown dtype"};
  if (count > 0 && !buffer) return {Code::kInvalidArgument, std::string(what) + ": null buffer"};
  return {};
}

}  // namespace

Status Group::Impl::post(bool is_send, const void* buffer, size_t count, DType dtype, int peer,
                         int tag, uint64_t* id) {
  const char* what = is_send ? "send" : "recv";
  NEURONCOLL_RETURN_IF_ERROR(begin(what));
  NEURONCOLL_RETURN_IF_ERROR(check_args(*this, peer, dtype, count, buffer, what));
  auto& queue = is_send ? sends[peer] : recvs[peer];
  *id = next_message++;
  queue.push_back({*id, is_send, static_cast<char*>(const_cast<void*>(buffer)), count, dtype, peer,
                   tag, 0, {}, std::chrono::steady_clock::now()});
  ++posted;
  return {};
}

bool Group::Impl::send_step(Message& m, bool* done) {
  Channel& ch = channel(rank(), m.peer);
  if (!transport::test_reached(ch.acked, sent_chunks[m.peer])) return false;
  if (ch.refused) {
    // The receiver refuses at a message's first chunk: seen here at a later
    // chunk, it is this message (sent to its end, which the receiver drains);
    // at the first it was the previous, one-chunk message.
    ch.refused = 0;
    m.status = Status(Code::kPeerError, "send to " + who(m.peer) + ": " + ch.message);
    if (m.chunk == 0) {
      m.status = Status(Code::kPeerError, m.status.message() + " (this send was not made)");
      *done = true;
      return true;
    }
  }
  const size_t bytes = m.count * dtype_size(m.dtype);
  const size_t chunks = std::max<size_t>(1, algorithms::ceil_div(bytes, kChannelBytes));
  ch.count = m.count;
  ch.dtype = static_cast<uint32_t>(m.dtype);
  ch.tag = m.tag;
  ch.chunk = m.chunk;
  ch.chunks = chunks;
  const size_t off = m.chunk * kChannelBytes;
  copy_bytes(channel_data(rank(), m.peer), m.buffer + off,
             std::min(kChannelBytes, bytes - std::min(bytes, off)));
  transport::post(ch.sent, ++sent_chunks[m.peer]);
  transport::ring(slot(m.peer).bell);
  *done = ++m.chunk == chunks;
  return true;
}

bool Group::Impl::recv_step(Message& m, bool* done) {
  Channel& ch = channel(m.peer, rank());
  if (!transport::test_reached(ch.sent, received_chunks[m.peer] + 1)) return false;
  if (m.chunk == 0 &&
      (ch.count != m.count || ch.dtype != static_cast<uint32_t>(m.dtype) || ch.tag != m.tag)) {
    m.status = Status(Code::kMismatch,
                      "recv from " + who(m.peer) + ": expected " + std::to_string(m.count) + " " +
                          dtype_name(m.dtype) + " with tag " + std::to_string(m.tag) + ", " +
                          who(m.peer) + " sent " + std::to_string(ch.count) + " " +
                          dtype_name(static_cast<DType>(std::min<uint32_t>(ch.dtype, kNumDTypes - 1))) +
                          " with tag " + std::to_string(ch.tag));
    std::snprintf(ch.message, sizeof(ch.message), "%s refused the message: %s",
                  who(rank()).c_str(), m.status.message().c_str());
    ch.refused = 1;
  }
  if (m.status.ok()) {
    const size_t bytes = m.count * dtype_size(m.dtype);
    const size_t off = m.chunk * kChannelBytes;
    copy_bytes(m.buffer + off, channel_data(m.peer, rank()),
               std::min(kChannelBytes, bytes - std::min(bytes, off)));
  }
  // Read before the ack, after which the sender rewrites the channel. A
  // refused message is drained to its end, keeping the channel in step.
  *done = ch.chunk + 1 >= ch.chunks;
  transport::post(ch.acked, ++received_chunks[m.peer]);
  transport::ring(slot(m.peer).bell);
  ++m.chunk;
  return true;
}

void Group::Impl::progress() {
  using clock = std::chrono::steady_clock;
  if (posted == 0) return;
  // Before looking at the channels: a peer's move after this wakes the next wait.
  bell_seen.store(slot(rank()).bell.value.load(std::memory_order_acquire));
  if (!begin("send").ok()) return fail_posted();
  // Each pass moves every head at most one chunk, so that all messages
  // advance together; repeated while anything moved.
  for (bool moved = true; moved;) {
    moved = false;
    for (int p = 0; p < size(); ++p) {
      for (auto* queue : {&sends[p], &recvs[p]}) {
        if (queue->empty()) continue;
        Message& m = queue->front();
        bool done = false;
        if (!(m.is_send ? send_step(m, &done) : recv_step(m, &done))) continue;
        moved = true;
        const auto now = clock::now();
        m.since = now;
        if (!done) continue;
        ended.push_back({m.id, std::move(m.status)});
        queue->pop_front();
        --posted;
        if (!queue->empty()) queue->front().since = now;
      }
    }
  }
  auto first = clock::time_point::max();
  for (int p = 0; p < size(); ++p) {
    for (auto* queue : {&sends[p], &recvs[p]}) {
      if (!queue->empty()) first = std::min(first, queue->front().since + options.timeout);
    }
  }
  if (aborted.load() || (posted > 0 && clock::now() >= first)) return fail_posted();
  next_timeout.store(first.time_since_epoch().count());
}

void Group::Impl::fail_posted() {
  const auto now = std::chrono::steady_clock::now();
  // The heads that stopped first (this breaks the group), then the rest.
  for (int p = 0; p < size(); ++p) {
    for (auto* queue : {&sends[p], &recvs[p]}) {
      if (queue->empty()) continue;
      const Message& m = queue->front();
      if (!aborted.load() && now < m.since + options.timeout) continue;
      ended.push_back({m.id, stopped_waiting(m.is_send ? "send" : "recv",
                                             who(p) + (m.is_send ? " to receive" : " to send"))});
      queue->pop_front();
    }
  }
  for (int p = 0; p < size(); ++p) {
    for (auto* queue : {&sends[p], &recvs[p]}) {
      for (const Message& m : *queue) ended.push_back({m.id, begin(m.is_send ? "send" : "recv")});
      queue->clear();
    }
  }
  posted = 0;
  next_timeout.store(std::chrono::steady_clock::time_point::max().time_since_epoch().count());
}

void Group::Impl::wait_for_peers(std::chrono::steady_clock::time_point until) {
  const std::chrono::steady_clock::time_point timeout{
      std::chrono::steady_clock::duration(next_timeout.load())};
  transport::wait_reached(slot(rank()).bell, bell_seen.load() + 1, std::min(until, timeout),
                          &aborted);
}

Status Group::Impl::wait_message(uint64_t id) {
  for (;;) {
    progress();
    for (auto it = ended.begin(); it != ended.end(); ++it) {
      if (it->id != id) continue;
      Status s = std::move(it->status);
      ended.erase(it);
      return s;
    }
    wait_for_peers(std::chrono::steady_clock::time_point::max());
  }
}

Status Group::Impl::send(const void* buffer, size_t count, DType dtype, int peer, int tag) {
  uint64_t id = 0;
  NEURONCOLL_RETURN_IF_ERROR(post(true, buffer, count, dtype, peer, tag, &id));
  return wait_message(id);
}

Status Group::Impl::recv(void* buffer, size_t count, DType dtype, int peer, int tag) {
  uint64_t id = 0;
  NEURONCOLL_RETURN_IF_ERROR(post(false, buffer, count, dtype, peer, tag, &id));
  return wait_message(id);
}

}  // namespace neuroncoll
