// Which ranks of a process group share a host. Ranks on one host run their
// collectives over shared memory (neuroncoll); hosts talk through gloo. A
// host is what neuroncoll::local_host_id() says (hostname, boot id, network
// namespace: namespaces of one machine share /dev/shm and may share the
// hostname) plus TORCHNEURON_DIST_HOST_ID, which splits one machine into
// several "hosts" so that the TCP path runs on loopback.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace torchneuron {

struct HostTopology {
  std::vector<std::vector<int>> hosts;  // ranks of each host, hosts ordered by lowest rank
  std::vector<int> host_of;             // per rank: its host's index
  std::vector<int> local_index;         // per rank: its index among its host's ranks
  int rank = 0;
  int64_t generation = 0;  // of this group's topology exchanges on its store

  bool multi_host() const { return hosts.size() > 1; }
  int host() const { return host_of[rank]; }
  const std::vector<int>& local_ranks() const { return hosts[host()]; }
  bool same_host(int peer) const { return host_of[peer] == host_of[rank]; }
  bool is_leader() const { return local_index[rank] == 0; }

  // Every rank of the group calls this: publishes its host identity on
  // `store` and waits (up to `timeout`) for everyone else's.
  static HostTopology exchange(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                               std::chrono::milliseconds timeout);
};

// This process's host identity (see the file comment).
std::string host_identity();

}  // namespace torchneuron
