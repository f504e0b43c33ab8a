// local_host_id(): hostname + boot id + network namespace inode. Two network
// namespaces of one machine share /dev/shm, but ranks in them are meant to
// talk as separate hosts (that is how the multi-host path is tested), so the
// namespace is part of the identity.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "neuroncoll/group.hpp"

namespace neuroncoll {

std::string local_host_id() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  struct stat st {};
  std::string netns = "?";
  if (::stat("/proc/self/ns/net", &st) == 0) netns = std::to_string(st.st_ino);
  return std::string(host) + "/" + boot_id + "/net:" + netns;
}

}  // namespace neuroncoll
