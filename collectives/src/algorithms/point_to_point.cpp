// send / recv over the per-pair channels of the segment. A message goes in
// chunks of the channel's size; the sender writes a chunk once the receiver
// acknowledged the previous one, so one chunk is in flight per direction.
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

Status Group::Impl::send(const void* buffer, size_t count, DType dtype, int peer, int tag) {
  NEURONCOLL_RETURN_IF_ERROR(begin("send"));
  NEURONCOLL_RETURN_IF_ERROR(check_args(*this, peer, dtype, count, buffer, "send"));
  Channel& ch = channel(rank(), peer);
  const size_t bytes = count * dtype_size(dtype);
  const size_t chunks = std::max<size_t>(1, algorithms::ceil_div(bytes, kChannelBytes));
  Status refusal;
  for (size_t k = 0; k < chunks; ++k) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    if (!transport::wait_reached(ch.acked, sent_chunks[peer], deadline, &aborted)) {
      return stopped_waiting("send", who(peer) + " to receive");
    }
    if (ch.refused) {
      // The receiver refuses at a message's first chunk: seen here at k > 0,
      // it is this message (sent to its end, which the receiver drains); at
      // k == 0 it was the previous, one-chunk message.
      ch.refused = 0;
      refusal = Status(Code::kPeerError, "send to " + who(peer) + ": " + ch.message);
      if (k == 0) {
        return {Code::kPeerError, refusal.message() + " (this send was not made)"};
      }
    }
    ch.count = count;
    ch.dtype = static_cast<uint32_t>(dtype);
    ch.tag = tag;
    ch.chunk = k;
    ch.chunks = chunks;
    const size_t off = k * kChannelBytes;
    copy_bytes(channel_data(rank(), peer), static_cast<const char*>(buffer) + off,
               std::min(kChannelBytes, bytes - std::min(bytes, off)));
    transport::post(ch.sent, ++sent_chunks[peer]);
  }
  return refusal;
}

Status Group::Impl::recv(void* buffer, size_t count, DType dtype, int peer, int tag) {
  NEURONCOLL_RETURN_IF_ERROR(begin("recv"));
  NEURONCOLL_RETURN_IF_ERROR(check_args(*this, peer, dtype, count, buffer, "recv"));
  Channel& ch = channel(peer, rank());
  const size_t bytes = count * dtype_size(dtype);
  Status verdict;
  for (size_t k = 0;; ++k) {
    const auto deadline = std::chrono::steady_clock::now() + options.timeout;
    if (!transport::wait_reached(ch.sent, received_chunks[peer] + 1, deadline, &aborted)) {
      return stopped_waiting("recv", who(peer) + " to send");
    }
    if (k == 0 && (ch.count != count || ch.dtype != static_cast<uint32_t>(dtype) || ch.tag != tag)) {
      verdict = Status(Code::kMismatch,
                       "recv from " + who(peer) + ": expected " +
                           std::to_string(count) + " " + dtype_name(dtype) + " with tag " +
                           std::to_string(tag) + ", " + who(peer) + " sent " +
                           std::to_string(ch.count) + " " +
                           dtype_name(static_cast<DType>(std::min<uint32_t>(ch.dtype, kNumDTypes - 1))) +
                           " with tag " + std::to_string(ch.tag));
      std::snprintf(ch.message, sizeof(ch.message), "%s refused the message: %s",
                    who(rank()).c_str(), verdict.message().c_str());
      ch.refused = 1;
    }
    if (verdict.ok()) {
      const size_t off = k * kChannelBytes;
      copy_bytes(static_cast<char*>(buffer) + off, channel_data(peer, rank()),
                 std::min(kChannelBytes, bytes - std::min(bytes, off)));
    }
    const bool last = ch.chunk + 1 >= ch.chunks;
    transport::post(ch.acked, ++received_chunks[peer]);
    if (last) break;  // a refused message is drained to its end, keeping the channel in step
  }
  return verdict;
}

}  // namespace neuroncoll
