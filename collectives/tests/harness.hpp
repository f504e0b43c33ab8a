// Test harness: runs a body on every rank of a group, ranks as threads or as
// forked processes over one FileStore in a fresh directory. A body returns ""
// on success or what went wrong (forked ranks cannot report gtest failures).
// Every run is bounded: processes still alive at the deadline are killed.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "neuroncoll/group.hpp"

namespace nctest {

// Sanitizer builds run 5-15x slower; the heaviest tests shrink there so the
// suite stays within its time limits.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSlowBuild = true;
#else
inline constexpr bool kSlowBuild = false;
#endif

struct Options {
  int size = 2;
  size_t staging_bytes = 64 << 10;
  size_t small_message_bytes = 8 << 10;
  std::chrono::milliseconds timeout{10000};
  std::string name = "test";
  int skip_create_rank = -1;  // this rank does not create the group
  std::vector<int> rank_labels;  // GroupOptions::rank_labels
};

struct Ctx {
  int rank = 0;
  neuroncoll::Group* group = nullptr;  // null when creation failed or was skipped
  neuroncoll::Status create_status;
  const Options* options = nullptr;
};

using Body = std::function<std::string(Ctx&)>;

std::vector<std::string> run_threads(const Options& options, const Body& body);
std::vector<std::string> run_processes(const Options& options, const Body& body,
                                       std::chrono::seconds deadline = std::chrono::seconds(40));

// "" when every rank succeeded, else "rank r: error" lines.
std::string failures(const std::vector<std::string>& results);

// Group names get this prefix ("p<pid of the test process>-"), so that a
// test process finds its own segments among those of tests running beside it.
const std::string& test_prefix();

// Entries of /dev/shm of this test process's groups.
std::vector<std::string> shm_leftovers();

}  // namespace nctest

#define NC_CHECK(cond, msg)                                                              \
  do {                                                                                   \
    if (!(cond)) return std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " + (msg); \
  } while (0)
#define NC_NEED_GROUP(c) \
  NC_CHECK((c).group != nullptr, "create: " + (c).create_status.to_string())
#define NC_CHECK_OK(expr)                                   \
  do {                                                      \
    ::neuroncoll::Status _s = (expr);                       \
    NC_CHECK(_s.ok(), std::string(#expr) + ": " + _s.to_string()); \
  } while (0)
