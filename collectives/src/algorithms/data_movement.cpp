// The collectives that move data without reducing it: broadcast, all_gather,
// gather, scatter, all_to_all. Each runs rounds of "write own staging, round,
// copy from peers' staging, release", the first write riding on the
// descriptor round so that a message that fits in staging costs one round.
#include <vector>

#include "common.hpp"

namespace neuroncoll {

using algorithms::ceil_div;
using algorithms::copy_bytes;
using algorithms::copy_output;
using algorithms::part;

Status Group::Impl::broadcast(void* buffer, size_t count, DType dtype, int root) {
  NEURONCOLL_RETURN_IF_ERROR(begin("broadcast"));
  Descriptor d = algorithms::make_descriptor(Kind::kBroadcast, dtype, count, root);
  Status local = algorithms::check_local(*this, d, buffer, buffer, true, true);
  const int n = size(), me = rank();
  if (n == 1) {
    ++seq;
    return local;
  }
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  const size_t bytes = count * esz;
  const size_t chunk = staging_bytes / esz;
  const size_t rounds = std::max<size_t>(1, ceil_div(count, chunk));
  char* buf = static_cast<char*>(buffer);
  auto write = [&](size_t k) {
    if (me == root) copy_bytes(staging(root), buf + k * chunk * esz, part(count, chunk, k) * esz);
  };
  auto read = [&](size_t k) {
    if (me != root) {
      copy_output(buf + k * chunk * esz, staging(root), part(count, chunk, k) * esz, bytes);
    }
    return Status{};
  };
  if (bytes <= small_message_bytes) return run(d, rounds, write, read);
  // Large, with the root's buffer in an arena: peers copy from it directly.
  if (local.ok() && me == root) d.in = arena_of(buffer, bytes);
  NEURONCOLL_RETURN_IF_ERROR(acquire("broadcast"));
  NEURONCOLL_RETURN_IF_ERROR(exchange(d));
  if (!slot(root).desc.in.uid) return staged_rounds(0, rounds, write, read, "broadcast");
  std::vector<char*> pin, pout;
  bool usable = false;
  NEURONCOLL_RETURN_IF_ERROR(check_direct("broadcast", &pin, &pout, &usable));
  if (!usable) return staged_rounds(0, rounds, write, read, "broadcast");
  ++stats.direct_broadcasts;
  if (me != root) copy_output(buf, pin[root], bytes, bytes);
  return round("broadcast");  // the root's buffer is free again
}

Status Group::Impl::all_gather(const void* in, void* out, size_t count, DType dtype) {
  return gather_to(Kind::kAllGather, in, out, count, dtype, -1);
}

Status Group::Impl::gather(const void* in, void* out, size_t count, DType dtype, int root) {
  return gather_to(Kind::kGather, in, out, count, dtype, root);
}

// kAllGather: every rank receives; kGather: `root` only.
Status Group::Impl::gather_to(Kind kind, const void* in, void* out, size_t count, DType dtype,
                              int root) {
  NEURONCOLL_RETURN_IF_ERROR(begin(kind_name(kind)));
  Descriptor d = algorithms::make_descriptor(kind, dtype, count, root);
  const int n = size(), me = rank();
  const bool receives = kind == Kind::kAllGather || me == root;
  Status local = algorithms::check_local(*this, d, in, out, true, receives);
  if (n == 1) return algorithms::single_rank_copy(*this, local, in, out, count * dtype_size(dtype));
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  const size_t bytes = count * esz;
  const size_t chunk = staging_bytes / esz;
  const size_t rounds = std::max<size_t>(1, ceil_div(count, chunk));
  auto write = [&](size_t k) {
    copy_bytes(staging(me), static_cast<const char*>(in) + k * chunk * esz,
               part(count, chunk, k) * esz);
  };
  auto read = [&](size_t k) {
    if (!receives) return Status{};
    for (int p = 0; p < n; ++p) {
      copy_output(static_cast<char*>(out) + (p * count + k * chunk) * esz, staging(p),
                  part(count, chunk, k) * esz, n * bytes);
    }
    return Status{};
  };
  if (kind != Kind::kAllGather || bytes <= small_message_bytes) return run(d, rounds, write, read);
  // Large all_gather with every rank's input in an arena: each rank copies
  // its peers' inputs straight into its output.
  if (local.ok()) d.in = arena_of(in, bytes);
  NEURONCOLL_RETURN_IF_ERROR(acquire("all_gather"));
  NEURONCOLL_RETURN_IF_ERROR(exchange(d));
  bool direct = true;
  for (int p = 0; p < n; ++p) direct = direct && slot(p).desc.in.uid;
  if (!direct) return staged_rounds(0, rounds, write, read, "all_gather");
  std::vector<char*> pin, pout;
  bool usable = false;
  NEURONCOLL_RETURN_IF_ERROR(check_direct("all_gather", &pin, &pout, &usable));
  if (!usable) return staged_rounds(0, rounds, write, read, "all_gather");
  ++stats.direct_all_gathers;
  for (int p = 0; p < n; ++p) {
    char* dst = static_cast<char*>(out) + p * bytes;
    if (dst != pin[p]) copy_output(dst, pin[p], bytes, n * bytes);
  }
  return round("all_gather");  // peers are done reading this rank's input
}

Status Group::Impl::scatter(const void* in, void* out, size_t count, DType dtype, int root) {
  NEURONCOLL_RETURN_IF_ERROR(begin("scatter"));
  Descriptor d = algorithms::make_descriptor(Kind::kScatter, dtype, count, root);
  const int n = size(), me = rank();
  Status local = algorithms::check_local(*this, d, in, out, me == root, true);
  if (n == 1) return algorithms::single_rank_copy(*this, local, in, out, count * dtype_size(dtype));
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  const size_t chunk = staging_bytes / (esz * n);
  const size_t region = chunk * esz;
  return run(
      d, std::max<size_t>(1, ceil_div(count, chunk)),
      [&](size_t k) {
        if (me != root) return;
        for (int q = 0; q < n; ++q) {
          copy_bytes(staging(root) + q * region,
                     static_cast<const char*>(in) + (q * count + k * chunk) * esz,
                     part(count, chunk, k) * esz);
        }
      },
      [&](size_t k) {
        copy_bytes(static_cast<char*>(out) + k * chunk * esz, staging(root) + me * region,
                   part(count, chunk, k) * esz);
        return Status{};
      });
}

// Counts travel first: each rank stages its send and receive counts with the
// descriptor, so every rank checks the whole matrix and reports the same
// disagreement. Data then moves in rounds of one staging region per pair.
Status Group::Impl::all_to_all(const void* in, const size_t* send_counts, void* out,
                               const size_t* recv_counts, DType dtype) {
  NEURONCOLL_RETURN_IF_ERROR(begin("all_to_all"));
  const int n = size(), me = rank();
  Descriptor d = algorithms::make_descriptor(Kind::kAllToAll, dtype, static_cast<size_t>(n), -1);
  Status local;
  if (!send_counts || !recv_counts) {
    local = invalid(d, "all_to_all: expected " + std::to_string(n) + " send and receive counts");
  } else {
    size_t sent = 0, received = 0;
    for (int q = 0; q < n; ++q) {
      sent += send_counts[q];
      received += recv_counts[q];
    }
    local = algorithms::check_local(*this, d, sent ? in : nullptr, received ? out : nullptr, false,
                                    false);
    if (local.ok() && ((sent && !in) || (received && !out))) {
      local = invalid(d, "all_to_all: null buffer with nonzero counts");
    }
  }
  const size_t esz = local.ok() ? dtype_size(dtype) : 1;
  NEURONCOLL_RETURN_IF_ERROR(acquire("all_to_all"));
  auto* table = reinterpret_cast<uint64_t*>(staging(me));
  if (local.ok()) {
    for (int q = 0; q < n; ++q) {
      table[q] = send_counts[q];
      table[n + q] = recv_counts[q];
    }
  }
  NEURONCOLL_RETURN_IF_ERROR(exchange(d));
  // sends[p * n + q]: what p sends to q.
  std::vector<uint64_t> sends(size_t(n) * n);
  std::string disagree;
  for (int p = 0; p < n; ++p) {
    const auto* t = reinterpret_cast<const uint64_t*>(staging(p));
    for (int q = 0; q < n; ++q) sends[size_t(p) * n + q] = t[q];
  }
  for (int q = 0; q < n; ++q) {
    const auto* t = reinterpret_cast<const uint64_t*>(staging(q));
    for (int p = 0; p < n; ++p) {
      if (t[n + p] != sends[size_t(p) * n + q] && disagree.size() < 400) {
        disagree += " " + who(p) + " sends " + std::to_string(sends[size_t(p) * n + q]) +
                    " to " + who(q) +
                    ", which expects " + std::to_string(t[n + p]) + ";";
      }
    }
  }
  release();
  if (!disagree.empty()) {
    return {Code::kMismatch, "all_to_all (group '" + options.name + "'): split sizes disagree:" + disagree};
  }
  const size_t chunk = staging_bytes / (esz * n);
  const size_t region = chunk * esz;
  size_t rounds = 0;
  for (uint64_t c : sends) rounds = std::max(rounds, ceil_div(c, chunk));
  std::vector<size_t> send_off(n, 0), recv_off(n, 0);
  for (int q = 1; q < n; ++q) {
    send_off[q] = send_off[q - 1] + send_counts[q - 1];
    recv_off[q] = recv_off[q - 1] + recv_counts[q - 1];
  }
  for (size_t k = 0; k < rounds; ++k) {
    NEURONCOLL_RETURN_IF_ERROR(acquire("all_to_all"));
    for (int q = 0; q < n; ++q) {
      copy_bytes(staging(me) + q * region,
                 static_cast<const char*>(in) + (send_off[q] + k * chunk) * esz,
                 part(send_counts[q], chunk, k) * esz);
    }
    NEURONCOLL_RETURN_IF_ERROR(round("all_to_all"));
    for (int p = 0; p < n; ++p) {
      copy_bytes(static_cast<char*>(out) + (recv_off[p] + k * chunk) * esz,
                 staging(p) + me * region, part(recv_counts[p], chunk, k) * esz);
    }
    release();
  }
  return {};
}

}  // namespace neuroncoll
