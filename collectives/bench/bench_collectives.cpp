// Bus bandwidth of all_reduce, all_gather and reduce_scatter, 4 KiB .. 64 MiB
// of float32 at 2 and 4 ranks (forked processes), buffers in ordinary memory
// (staging path) and in SharedArenas (direct path), against memcpy bandwidth
// measured in the same run. Bus bandwidth as nccl-tests define it: all_reduce
// bytes * 2 (n - 1) / n / time, all_gather and reduce_scatter bytes of the
// whole buffer * (n - 1) / n / time; the ratio is to memcpy's bytes/s.
//   neuroncoll_bench [max_mib=64] [op ...]   (default: all three)
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "neuroncoll/arena.hpp"
#include "neuroncoll/group.hpp"

using namespace neuroncoll;
using clk = std::chrono::steady_clock;

namespace {

double seconds_since(clk::time_point t0) {
  return std::chrono::duration<double>(clk::now() - t0).count();
}

double memcpy_bandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::memcpy(b.data(), a.data(), bytes);
  int iters = 0;
  const auto t0 = clk::now();
  do {
    std::memcpy((iters & 1) ? a.data() : b.data(), (iters & 1) ? b.data() : a.data(), bytes);
    ++iters;
  } while (seconds_since(t0) < 0.3);
  return double(bytes) * iters / seconds_since(t0);
}

// One collective on `bytes` of the whole buffer: `big` holds max_bytes,
// `small` max_bytes / n (all_gather's input, reduce_scatter's output).
Status run_op(Group& g, const std::string& op, float* big, float* small, size_t bytes, int n) {
  const size_t count = bytes / 4;
  if (op == "all_gather") return g.all_gather(small, big, count / n, DType::kFloat32);
  if (op == "reduce_scatter") {
    return g.reduce_scatter(big, small, count / n, DType::kFloat32, ReduceOp::kSum);
  }
  return g.all_reduce(big, big, count, DType::kFloat32, ReduceOp::kSum);
}

int run_rank(const std::string& dir, int rank, int n, bool arena_mode, size_t max_bytes,
             double memcpy_bw, const std::vector<std::string>& ops) {
  std::shared_ptr<Store> store;
  if (!make_file_store(dir, &store).ok()) return 1;
  GroupOptions o;
  o.store = store;
  o.rank = rank;
  o.size = n;
  o.name = arena_mode ? "bench-arena" : "bench";
  std::unique_ptr<Group> g;
  Status s = Group::create(o, &g);
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
    return 1;
  }
  std::unique_ptr<SharedArena> arena;
  std::vector<float> plain;
  const size_t small_bytes = max_bytes / n;
  float* big = nullptr;
  float* small = nullptr;
  if (arena_mode) {
    if (!SharedArena::create(max_bytes + small_bytes + 8192, &arena).ok()) return 1;
    big = static_cast<float*>(arena->allocate(max_bytes, 4096));
    small = static_cast<float*>(arena->allocate(small_bytes, 4096));
  } else {
    plain.resize((max_bytes + small_bytes) / 4);
    big = plain.data();
    small = big + max_bytes / 4;
  }
  std::memset(big, 0, max_bytes);
  std::memset(small, 0, small_bytes);
  for (const std::string& op : ops) {
    for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
      for (int w = 0; w < 3; ++w) (void)run_op(*g, op, big, small, bytes, n);
      const int iters =
          static_cast<int>(std::max<size_t>(5, std::min<size_t>(2000, (256u << 20) / bytes)));
      (void)g->barrier();
      const auto t0 = clk::now();
      for (int i = 0; i < iters; ++i) {
        s = run_op(*g, op, big, small, bytes, n);
        if (!s.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", rank, s.to_string().c_str());
          return 1;
        }
      }
      (void)g->barrier();
      const double t = seconds_since(t0) / iters;
      if (rank == 0) {
        const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
        const double busbw = double(bytes) * factor / t;
        std::printf("%-15s %-7s ranks %d %9zu KiB  %9.1f us  busbw %7.2f GB/s  %5.2fx memcpy\n",
                    op.c_str(), arena_mode ? "arena" : "staging", n, bytes >> 10, t * 1e6,
                    busbw / 1e9, busbw / memcpy_bw);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t max_bytes = size_t(argc > 1 ? std::atoi(argv[1]) : 64) << 20;
  std::vector<std::string> ops(argv + std::min(argc, 2), argv + argc);
  if (ops.empty()) ops = {"all_reduce", "all_gather", "reduce_scatter"};
  for (const std::string& op : ops) {
    if (op != "all_reduce" && op != "all_gather" && op != "reduce_scatter") {
      std::fprintf(stderr, "unknown op '%s' (all_reduce, all_gather, reduce_scatter)\n", op.c_str());
      return 2;
    }
  }
  const double bw = memcpy_bandwidth(max_bytes);
  std::printf("memcpy %zu MiB: %.2f GB/s (bytes copied per second)\n", max_bytes >> 20, bw / 1e9);
  std::fflush(stdout);  // before fork, or every child prints it again
  int failures = 0;
  for (int n : {2, 4}) {
    for (bool arena_mode : {false, true}) {
      char tmpl[] = "/tmp/neuroncoll-bench-XXXXXX";
      const std::string dir = ::mkdtemp(tmpl);
      std::vector<pid_t> pids;
      for (int r = 0; r < n; ++r) {
        pid_t pid = ::fork();
        if (pid == 0) ::_exit(run_rank(dir, r, n, arena_mode, max_bytes, bw, ops));
        pids.push_back(pid);
      }
      for (pid_t pid : pids) {
        int st = 0;
        ::waitpid(pid, &st, 0);
        failures += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      }
      std::filesystem::remove_all(dir);
    }
  }
  return failures ? 1 : 0;
}
