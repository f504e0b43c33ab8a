// Where a buffer lives, as peers can find it: the arena registry of this
// process, and the mappings of peers' arenas a group has opened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "neuroncoll/status.hpp"

namespace neuroncoll::transport {

// A buffer inside some process's SharedArena; uid 0 means "not in an arena".
struct ArenaRef {
  uint64_t uid = 0;     // unique per arena (fds are reused, uids are not)
  int32_t pid = 0;      // owner process
  int32_t fd = -1;      // the owner's memfd
  uint64_t ino = 0;     // its inode (an fd number can be reused)
  uint64_t size = 0;    // arena bytes
  uint64_t offset = 0;  // of the buffer within the arena
};

// The arena of this process holding [ptr, ptr + bytes), if any.
ArenaRef find_arena(const void* ptr, size_t bytes);

// Peers' arenas mapped into this process, kept until the group goes.
class PeerArenas {
 public:
  PeerArenas() = default;
  ~PeerArenas();
  PeerArenas(const PeerArenas&) = delete;
  PeerArenas& operator=(const PeerArenas&) = delete;
  // The address of `ref`'s buffer in this process.
  Status resolve(const ArenaRef& ref, void** ptr);

 private:
  struct Mapping {
    void* base;
    size_t size;
    bool owned;  // mapped here (else the arena is this process's own)
  };
  std::map<std::pair<int32_t, uint64_t>, Mapping> mappings_;  // (pid, uid)
};

}  // namespace neuroncoll::transport
