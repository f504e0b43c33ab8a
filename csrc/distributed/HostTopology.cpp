#include "csrc/distributed/HostTopology.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <map>

#include "neuroncoll/group.hpp"

namespace torchneuron {

std::string host_identity() {
  std::string id = neuroncoll::local_host_id();
  if (const char* extra = std::getenv("TORCHNEURON_DIST_HOST_ID"); extra && *extra) {
    id += "/override:" + std::string(extra);
  }
  return id;
}

HostTopology HostTopology::exchange(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                    int size, std::chrono::milliseconds timeout) {
  HostTopology t;
  t.rank = rank;
  // A group made again on the same store (a process group re-created after
  // destroy) meets under fresh keys: each rank counts its own exchanges.
  t.generation = store->add("neuron/topology/generation/" + std::to_string(rank), 1);
  const std::string prefix = "neuron/topology/" + std::to_string(t.generation) + "/";
  const std::string mine = host_identity();
  store->set(prefix + std::to_string(rank), std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int p = 0; p < size; ++p) keys.push_back(prefix + std::to_string(p));
  try {
    store->wait(keys, timeout);
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "ProcessGroupNeuron: rank ", rank, " timed out after ", timeout.count(),
                " ms waiting for the host identities of the group's ", size,
                " ranks (some ranks did not create the group): ", e.what());
  }
  std::map<std::string, int> index;
  t.host_of.resize(size);
  t.local_index.resize(size);
  for (int p = 0; p < size; ++p) {
    const std::vector<uint8_t> v = store->get(keys[p]);
    auto [it, fresh] = index.emplace(std::string(v.begin(), v.end()), static_cast<int>(t.hosts.size()));
    if (fresh) t.hosts.emplace_back();
    t.host_of[p] = it->second;
    t.local_index[p] = static_cast<int>(t.hosts[it->second].size());
    t.hosts[it->second].push_back(p);
  }
  return t;
}

}  // namespace torchneuron
