// Group creation (rendezvous through the store, the control segment) and the
// round protocol (group_impl.hpp). The collectives are in src/algorithms/.
#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "group_impl.hpp"

namespace neuroncoll {
namespace {

constexpr uint64_t kMagic = 0x6e63636f6c6c3031ull;  // "nccoll01"
constexpr size_t kPage = 4096;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t segment_bytes(int size, size_t staging) {
  return round_up(sizeof(SegmentHeader) + sizeof(RankSlot) * size, kPage) + staging * size +
         static_cast<size_t>(size) * size * (sizeof(Channel) + kChannelBytes);
}

// This process's pid namespace, as an inode number (0 if unknown).
uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

// A segment's name lives only until every rank mapped it; a process killed
// inside that window (during Group::create) leaves it behind. Creators sweep
// such names: those of their own pid namespace whose creator is gone.
void sweep_stale_segments() {
  const std::string ns = "-n" + std::to_string(pid_namespace()) + "-";
  DIR* d = ::opendir("/dev/shm");
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("neuroncoll-", 0) != 0) continue;
    const size_t at = name.rfind(ns);
    if (at == std::string::npos) continue;
    const long pid = std::strtol(name.c_str() + at + ns.size(), nullptr, 10);
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      ::shm_unlink(("/" + name).c_str());
    }
  }
  ::closedir(d);
}

// /dev/shm names: "/neuroncoll-<group name, safe characters, cut>-n<pid
// namespace>-<pid>-<random>".
std::string segment_name(const std::string& group) {
  std::string safe;
  for (char c : group) {
    if (safe.size() >= 40) break;
    safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-') ? c : '_';
  }
  std::random_device rd;
  char tail[64];
  std::snprintf(tail, sizeof(tail), "-n%llu-%d-%08x",
                static_cast<unsigned long long>(pid_namespace()), static_cast<int>(::getpid()), rd());
  return "/neuroncoll-" + safe + tail;
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kCreate: return "create";
    case Kind::kAllReduce: return "all_reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kReduce: return "reduce";
    case Kind::kAllGather: return "all_gather";
    case Kind::kReduceScatter: return "reduce_scatter";
    case Kind::kGather: return "gather";
    case Kind::kScatter: return "scatter";
    case Kind::kAllToAll: return "all_to_all";
    case Kind::kBarrier: return "barrier";
    case Kind::kDirectCheck: return "direct access check";
  }
  return "?";
}

std::string Group::Impl::who(int r) const {
  const auto& labels = options.rank_labels;
  return "rank " + std::to_string(r >= 0 && r < static_cast<int>(labels.size()) ? labels[r] : r);
}

std::string Group::Impl::who_list(const std::vector<int>& ranks) const {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + who(r).substr(5);
  return s;
}

void slice_of(size_t count, size_t elem_size, int n, int r, size_t* begin, size_t* end) {
  const size_t unit = elem_size >= 64 ? 1 : 64 / elem_size;
  const size_t units = (count + unit - 1) / unit;
  *begin = std::min(count, units * r / n * unit);
  *end = std::min(count, units * (r + 1) / n * unit);
}

// ---- round protocol --------------------------------------------------------

Status Group::Impl::wait_all(uint32_t target, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::vector<int> missing;
  for (int p = 0; p < size(); ++p) {
    if (p == rank()) continue;
    if (!transport::wait_reached(slot(p).flag, target, deadline, &aborted)) missing.push_back(p);
  }
  if (missing.empty()) return {};
  return stopped_waiting(what, "rank(s) " + who_list(missing));
}

Status Group::Impl::stopped_waiting(const char* what, const std::string& waiting_for) {
  const std::string where = std::string(what) + " (group '" + options.name + "', " +
                            who(rank()) + ", collective #" + std::to_string(seq) + "): ";
  if (aborted.load()) {
    broken = Status(Code::kAborted, where + "the group was aborted while waiting for " + waiting_for);
  } else {
    broken = Status(Code::kTimeout, where + "timed out after " +
                                        std::to_string(options.timeout.count()) +
                                        " ms waiting for " + waiting_for +
                                        " (not arrived: dead, hung, or calling another collective)");
  }
  return broken;
}

Status Group::Impl::round(const char* what) {
  ++step;
  transport::post(slot(rank()).flag, step);
  pending_release = false;
  return wait_all(step, what);
}

void Group::Impl::release() {
  ++step;
  transport::post(slot(rank()).flag, step);
  pending_release = true;
}

Status Group::Impl::acquire(const char* what) {
  if (!pending_release) return {};
  pending_release = false;
  return wait_all(step, what);
}

Status Group::Impl::begin(const char* what) {
  if (aborted.load() && broken.ok()) {
    broken = Status(Code::kAborted, "group '" + options.name + "' was aborted");
  }
  if (!broken.ok()) {
    return {Code::kAborted, std::string(what) + ": group '" + options.name +
                                "' failed earlier and is unusable: " + broken.to_string()};
  }
  return {};
}

Status Group::Impl::invalid(Descriptor& desc, const std::string& message) {
  desc.invalid = kInvalidArgs;
  std::snprintf(desc.message, sizeof(desc.message), "%s", message.c_str());
  return {Code::kInvalidArgument, message};
}

std::string Group::Impl::describe(const Descriptor& d) const {
  std::string s = std::string(kind_name(d.kind)) + " " + dtype_name(d.dtype);
  if (d.uses_op) s += std::string(" ") + reduce_op_name(d.op);
  s += " count " + std::to_string(d.count);
  if (d.root >= 0) s += " root " + std::to_string(d.root);
  s += " (collective #" + std::to_string(d.seq) + ")";
  return s;
}

Status Group::Impl::exchange(Descriptor& desc) {
  const char* what = kind_name(desc.kind);
  desc.seq = seq++;
  std::memcpy(static_cast<void*>(&slot(rank()).desc), &desc, sizeof(Descriptor));
  NEURONCOLL_RETURN_IF_ERROR(round(what));
  // Every rank builds the same verdict from the same descriptors.
  std::string invalid_ranks, failed_ranks;
  bool differ = false;
  const Descriptor& d0 = slot(0).desc;
  for (int p = 0; p < size(); ++p) {
    const Descriptor& d = slot(p).desc;
    std::string& list = d.invalid == kFailed ? failed_ranks : invalid_ranks;
    if (d.invalid) list += std::string(list.empty() ? "" : "; ") + who(p) + ": " + d.message;
    if (d.seq != d0.seq || d.kind != d0.kind || d.dtype != d0.dtype || d.uses_op != d0.uses_op ||
        (d.uses_op && d.op != d0.op) || d.count != d0.count || d.root != d0.root) {
      differ = true;
    }
  }
  Status result;
  if (desc.invalid == kFailed) {
    result = Status(Code::kAborted, std::string("failed: ") + desc.message);
  } else if (!failed_ranks.empty()) {
    result = Status(Code::kPeerError, std::string(what) + ": " + failed_ranks);
  } else if (!invalid_ranks.empty()) {
    result = desc.invalid ? Status(Code::kInvalidArgument, std::string(what) + ": " + desc.message)
                          : Status(Code::kPeerError, std::string(what) + ": invalid arguments on " +
                                                         invalid_ranks);
  } else if (differ) {
    std::string m = std::string(what) + " (group '" + options.name +
                    "'): ranks called different collectives or arguments:";
    for (int p = 0; p < size(); ++p) {
      m += std::string(p ? "; " : " ") + who(p) + ": " + describe(slot(p).desc);
    }
    result = Status(Code::kMismatch, m);
  }
  if (!result.ok()) release();
  return result;
}

Status Group::Impl::run(Descriptor desc, size_t rounds, const std::function<void(size_t)>& write,
                        const std::function<Status(size_t)>& read) {
  const char* what = kind_name(desc.kind);
  NEURONCOLL_RETURN_IF_ERROR(acquire(what));
  if (!desc.invalid && rounds > 0) write(0);
  NEURONCOLL_RETURN_IF_ERROR(exchange(desc));
  if (rounds == 0) {
    release();
    return {};
  }
  NEURONCOLL_RETURN_IF_ERROR(read(0));
  release();
  return staged_rounds(1, rounds, write, read, what);
}

Status Group::Impl::staged_rounds(size_t first, size_t rounds,
                                  const std::function<void(size_t)>& write,
                                  const std::function<Status(size_t)>& read, const char* what) {
  for (size_t k = first; k < rounds; ++k) {
    NEURONCOLL_RETURN_IF_ERROR(acquire(what));
    write(k);
    NEURONCOLL_RETURN_IF_ERROR(round(what));
    NEURONCOLL_RETURN_IF_ERROR(read(k));
    release();
  }
  return {};
}

Status Group::Impl::check_direct(const char* what, std::vector<char*>* in,
                                 std::vector<char*>* out, bool* usable) {
  *usable = false;
  in->assign(size(), nullptr);
  out->assign(size(), nullptr);
  std::string failure;
  for (int p = 0; p < size() && failure.empty(); ++p) {
    const Descriptor& d = slot(p).desc;
    void* pi = nullptr;
    void* po = nullptr;
    // Only the buffers a rank described (uid 0: not needed by this collective).
    Status s = d.in.uid ? arenas.resolve(d.in, &pi) : Status();
    if (s.ok() && d.out.uid) s = arenas.resolve(d.out, &po);
    if (!s.ok()) failure = who(p) + "'s buffers: " + s.message();
    (*in)[p] = static_cast<char*>(pi);
    (*out)[p] = static_cast<char*>(po);
  }
  RankSlot& mine = slot(rank());
  mine.direct_failed = failure.empty() ? 0 : 1;
  std::snprintf(mine.direct_message, sizeof(mine.direct_message), "%s", failure.c_str());
  NEURONCOLL_RETURN_IF_ERROR(round(what));
  bool all_mapped = true;
  for (int p = 0; p < size(); ++p) all_mapped = all_mapped && !slot(p).direct_failed;
  if (all_mapped) {
    *usable = true;
    return {};
  }
  // Every rank saw the same verdicts (what failed is in each rank's
  // direct_message): all fall back alike, now and later.
  direct_off = true;
  return {};
}

// ---- creation --------------------------------------------------------------

Status Group::create(const GroupOptions& o, std::unique_ptr<Group>* group) {
  if (!o.store) return {Code::kInvalidArgument, "Group::create: no store"};
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return {Code::kInvalidArgument, "Group::create: rank " + std::to_string(o.rank) +
                                        " outside a group of size " + std::to_string(o.size)};
  }
  if (o.timeout.count() <= 0) return {Code::kInvalidArgument, "Group::create: timeout must be > 0"};
  if (o.name.empty()) return {Code::kInvalidArgument, "Group::create: empty group name"};
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  Store& store = *o.store;
  const std::string base = "neuroncoll/" + o.name + "/";
  int64_t generation = 0;
  NEURONCOLL_RETURN_IF_ERROR(store.add(base + "generation/" + std::to_string(o.rank), 1, &generation));
  const std::string prefix = base + std::to_string(generation) + "/";

  // One host: every rank must see the same host id.
  const std::string host = local_host_id();
  NEURONCOLL_RETURN_IF_ERROR(store.set(prefix + "host/" + std::to_string(o.rank), host));
  std::string other_hosts;
  for (int p = 0; p < o.size; ++p) {
    std::string h;
    NEURONCOLL_RETURN_IF_ERROR(store.get(prefix + "host/" + std::to_string(p), o.timeout, &h));
    if (h != host) other_hosts += " rank " + std::to_string(p) + " on " + h + ";";
  }
  if (!other_hosts.empty()) {
    return {Code::kUnsupported, "Group::create('" + o.name + "'): rank " + std::to_string(o.rank) +
                                    " on " + host + ", but" + other_hosts +
                                    " shared-memory groups need one host"};
  }

  std::string name;
  if (o.rank == 0) {
    // Staging holds one 64-byte unit per destination at least.
    size_t staging = round_up(std::max<size_t>({o.staging_bytes, kPage, 64 * size_t(o.size)}), kPage);
    sweep_stale_segments();
    name = segment_name(o.name);
    NEURONCOLL_RETURN_IF_ERROR(transport::ShmSegment::create(name, segment_bytes(o.size, staging),
                                                             &impl->segment));
    auto* h = static_cast<SegmentHeader*>(impl->segment.data());
    h->magic = kMagic;
    h->size = static_cast<uint32_t>(o.size);
    h->staging_bytes = staging;
    h->small_message_bytes = o.small_message_bytes;
    Status s = store.set(prefix + "segment", name + "|" + std::to_string(staging));
    if (!s.ok()) {
      transport::ShmSegment::unlink(name);
      return s;
    }
  } else {
    std::string value;
    NEURONCOLL_RETURN_IF_ERROR(store.get(prefix + "segment", o.timeout, &value));
    const size_t bar = value.find('|');
    name = value.substr(0, bar);
    const size_t staging = std::stoull(value.substr(bar + 1));
    NEURONCOLL_RETURN_IF_ERROR(transport::ShmSegment::open(name, segment_bytes(o.size, staging),
                                                           &impl->segment));
    auto* h = static_cast<SegmentHeader*>(impl->segment.data());
    if (h->magic != kMagic || h->size != static_cast<uint32_t>(o.size)) {
      return {Code::kMismatch, "Group::create('" + o.name + "'): rank 0 made a group of size " +
                                   std::to_string(h->size) + ", rank " + std::to_string(o.rank) +
                                   " expects size " + std::to_string(o.size)};
    }
  }
  // The last rank to map the segment removes its name.
  int64_t mapped = 0;
  Status s = store.add(prefix + "mapped", 1, &mapped);
  if (!s.ok() || mapped >= o.size) transport::ShmSegment::unlink(name);
  NEURONCOLL_RETURN_IF_ERROR(s);

  impl->header = static_cast<SegmentHeader*>(impl->segment.data());
  impl->slots = reinterpret_cast<RankSlot*>(static_cast<char*>(impl->segment.data()) +
                                            sizeof(SegmentHeader));
  impl->staging_bytes = impl->header->staging_bytes;
  impl->small_message_bytes = std::min<size_t>(impl->header->small_message_bytes, impl->staging_bytes);
  impl->staging_base = static_cast<char*>(impl->segment.data()) +
                       round_up(sizeof(SegmentHeader) + sizeof(RankSlot) * o.size, kPage);
  impl->sent_chunks.assign(o.size, 0);
  impl->received_chunks.assign(o.size, 0);
  impl->sends.resize(o.size);
  impl->recvs.resize(o.size);
  // Everyone mapped and arrived, or the name is removed anyway.
  Descriptor d;
  d.kind = Kind::kCreate;
  s = impl->exchange(d);
  if (!s.ok()) {
    transport::ShmSegment::unlink(name);
    return s;
  }
  impl->release();
  group->reset(new Group(std::move(impl)));
  return {};
}

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Group::~Group() = default;
int Group::rank() const { return impl_->rank(); }
int Group::size() const { return impl_->size(); }
const std::string& Group::name() const { return impl_->options.name; }
GroupStats Group::stats() const {
  GroupStats s = impl_->stats;
  s.collectives = impl_->seq - 1;  // creation took one descriptor round
  return s;
}

Status Group::all_reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                         double premul_factor) {
  return impl_->all_reduce(in, out, count, dtype, op, premul_factor);
}
Status Group::broadcast(void* buffer, size_t count, DType dtype, int root) {
  return impl_->broadcast(buffer, count, dtype, root);
}
Status Group::reduce(const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
                     double premul_factor) {
  return impl_->reduce(in, out, count, dtype, op, root, premul_factor);
}
Status Group::all_gather(const void* in, void* out, size_t count, DType dtype) {
  return impl_->all_gather(in, out, count, dtype);
}
Status Group::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                             double premul_factor) {
  return impl_->reduce_scatter(in, out, count, dtype, op, premul_factor);
}
Status Group::gather(const void* in, void* out, size_t count, DType dtype, int root) {
  return impl_->gather(in, out, count, dtype, root);
}
Status Group::scatter(const void* in, void* out, size_t count, DType dtype, int root) {
  return impl_->scatter(in, out, count, dtype, root);
}
Status Group::all_to_all(const void* in, std::span<const size_t> send_counts, void* out,
                         std::span<const size_t> recv_counts, DType dtype) {
  if (send_counts.size() != static_cast<size_t>(size()) ||
      recv_counts.size() != static_cast<size_t>(size())) {
    // Still takes part in the collective so that peers fail too.
    Status s = impl_->all_to_all(nullptr, nullptr, nullptr, nullptr, dtype);
    (void)s;
    return {Code::kInvalidArgument, "all_to_all: expected " + std::to_string(size()) +
                                        " send and receive counts, got " +
                                        std::to_string(send_counts.size()) + " and " +
                                        std::to_string(recv_counts.size())};
  }
  return impl_->all_to_all(in, send_counts.data(), out, recv_counts.data(), dtype);
}
Status Group::send(const void* buffer, size_t count, DType dtype, int peer, int tag) {
  return impl_->send(buffer, count, dtype, peer, tag);
}
Status Group::recv(void* buffer, size_t count, DType dtype, int peer, int tag) {
  return impl_->recv(buffer, count, dtype, peer, tag);
}
Status Group::isend(const void* buffer, size_t count, DType dtype, int peer, int tag,
                    uint64_t* id) {
  return impl_->post(true, buffer, count, dtype, peer, tag, id);
}
Status Group::irecv(void* buffer, size_t count, DType dtype, int peer, int tag, uint64_t* id) {
  return impl_->post(false, buffer, count, dtype, peer, tag, id);
}
size_t Group::progress(std::vector<Completion>* done) {
  impl_->progress();
  for (Completion& c : impl_->ended) done->push_back(std::move(c));
  impl_->ended.clear();
  return impl_->posted;
}
void Group::wait_for_peers(std::chrono::steady_clock::time_point until) {
  impl_->wait_for_peers(until);
}
void Group::wake() { transport::ring(impl_->slot(impl_->rank()).bell); }
void Group::abort() { impl_->aborted.store(true); }

Status Group::fail(const std::string& message) {
  NEURONCOLL_RETURN_IF_ERROR(impl_->begin("fail"));
  NEURONCOLL_RETURN_IF_ERROR(impl_->acquire("fail"));
  Descriptor d;
  d.kind = Kind::kBarrier;
  d.invalid = kFailed;
  std::snprintf(d.message, sizeof(d.message), "%s", message.c_str());
  Status s = impl_->exchange(d);
  // exchange() reports this rank's own failure as kAborted once the peers
  // have seen it; anything else is the round's own error.
  return s.code() == Code::kAborted ? Status() : s;
}

Status Group::barrier() {
  NEURONCOLL_RETURN_IF_ERROR(impl_->begin("barrier"));
  Descriptor d;
  d.kind = Kind::kBarrier;
  return impl_->run(d, 0, nullptr, nullptr);
}

}  // namespace neuroncoll
