// Every collective against the reference, ranks as threads and as processes,
// world sizes 1..8, counts 0, 1, odd and large (larger than staging, so the
// chunked paths run), every dtype and op for the reductions.
#include <gtest/gtest.h>

#include <numeric>

#include "harness.hpp"
#include "reference.hpp"

namespace {

using namespace neuroncoll;
using nctest::Ctx;

// Large: 40000 elements exceed the harness's 64 KiB staging for every dtype
// but the 1-byte ones, and the 8 KiB small-message limit for all.
constexpr size_t kCounts[] = {0, 1, 1001, 40000};

// Sanitizer builds: the large count for a few dtypes only.
using nctest::kSlowBuild;
bool skip_in_slow_build(size_t count, DType d) {
  return kSlowBuild && count > 1001 && d != DType::kFloat32 && d != DType::kBFloat16 &&
         d != DType::kInt64;
}

std::string all_reduce_body(Ctx& c) {
  NC_NEED_GROUP(c);
  const int n = c.group->size();
  for (size_t count : kCounts) {
    for (DType d : nctest::kAllDTypes) {
      if (skip_in_slow_build(count, d)) continue;
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(nctest::make_input(d, r, count));
      for (ReduceOp op : nctest::kAllOps) {
        if (!op_supported(d, op)) continue;
        const auto want = nctest::reference_reduce(d, op, inputs, count);
        std::vector<uint8_t> out(count * dtype_size(d) + 1, 0xAB);
        const double f = nctest::premul_factor(c.rank);
        NC_CHECK_OK(c.group->all_reduce(inputs[c.rank].data(), out.data(), count, d, op, f));
        const std::string what = std::string("all_reduce ") + reduce_op_name(op) + " count " +
                                 std::to_string(count);
        std::string diff = nctest::compare_bytes(d, out.data(), want.data(), count, what);
        NC_CHECK(diff.empty(), diff);
        NC_CHECK(out[count * dtype_size(d)] == 0xAB, what + ": wrote past the end");
        // In place.
        std::vector<uint8_t> buf = inputs[c.rank];
        NC_CHECK_OK(c.group->all_reduce(buf.data(), buf.data(), count, d, op, f));
        diff = nctest::compare_bytes(d, buf.data(), want.data(), count, what + " in place");
        NC_CHECK(diff.empty(), diff);
      }
    }
  }
  return "";
}

std::string data_movement_body(Ctx& c) {
  NC_NEED_GROUP(c);
  Group& g = *c.group;
  const int n = g.size(), me = c.rank;
  for (size_t count : kCounts) {
    for (DType d : {DType::kFloat32, DType::kInt64, DType::kBFloat16, DType::kUInt8}) {
      const size_t es = dtype_size(d);
      const std::string at = std::string(dtype_name(d)) + " count " + std::to_string(count);
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(nctest::make_input(d, r, count));
      std::vector<std::vector<uint8_t>> wide;  // n * count per rank
      for (int r = 0; r < n; ++r) wide.push_back(nctest::make_input(d, r, n * count, 3));

      // broadcast from each root in turn (n <= 3) or from the last rank.
      for (int root = (n <= 3 ? 0 : n - 1); root < n; ++root) {
        std::vector<uint8_t> buf = me == root ? inputs[root] : std::vector<uint8_t>(count * es + 1);
        NC_CHECK_OK(g.broadcast(buf.data(), count, d, root));
        std::string diff = nctest::compare_bytes(d, buf.data(), inputs[root].data(), count,
                                                 "broadcast " + at);
        NC_CHECK(diff.empty(), diff);
      }
      // all_gather and gather.
      std::vector<uint8_t> gathered(n * count * es + 1);
      NC_CHECK_OK(g.all_gather(inputs[me].data(), gathered.data(), count, d));
      for (int p = 0; p < n; ++p) {
        std::string diff = nctest::compare_bytes(d, gathered.data() + p * count * es,
                                                 inputs[p].data(), count, "all_gather " + at);
        NC_CHECK(diff.empty(), diff);
      }
      const int root = n / 2;
      std::vector<uint8_t> g2(n * count * es + 1);
      NC_CHECK_OK(g.gather(inputs[me].data(), me == root ? g2.data() : nullptr, count, d, root));
      if (me == root) NC_CHECK(std::memcmp(g2.data(), gathered.data(), n * count * es) == 0, "gather " + at);
      // scatter.
      std::vector<uint8_t> part(count * es + 1);
      NC_CHECK_OK(g.scatter(me == root ? wide[root].data() : nullptr, part.data(), count, d, root));
      NC_CHECK(std::memcmp(part.data(), wide[root].data() + me * count * es, count * es) == 0,
               "scatter " + at);
      // reduce_scatter (SUM) and reduce (MAX).
      const auto want_rs = nctest::reference_reduce(d, ReduceOp::kSum, wide, count, me * count);
      NC_CHECK_OK(g.reduce_scatter(wide[me].data(), part.data(), count, d, ReduceOp::kSum));
      std::string diff = nctest::compare_bytes(d, part.data(), want_rs.data(), count, "reduce_scatter " + at);
      NC_CHECK(diff.empty(), diff);
      const auto want_max = nctest::reference_reduce(d, ReduceOp::kMax, inputs, count);
      std::vector<uint8_t> red(count * es + 1);
      NC_CHECK_OK(g.reduce(inputs[me].data(), red.data(), count, d, ReduceOp::kMax, root));
      if (me == root) {
        diff = nctest::compare_bytes(d, red.data(), want_max.data(), count, "reduce " + at);
        NC_CHECK(diff.empty(), diff);
      }
      // all_to_all, uneven: rank p sends (p + q) % 3 * count / 2 + q elements to q.
      auto split = [&](int p, int q) { return size_t((p + q) % 3) * count / 2 + size_t(q); };
      std::vector<size_t> sends(n), recvs(n);
      for (int q = 0; q < n; ++q) {
        sends[q] = split(me, q);
        recvs[q] = split(q, me);
      }
      const size_t total_send = std::accumulate(sends.begin(), sends.end(), size_t(0));
      const size_t total_recv = std::accumulate(recvs.begin(), recvs.end(), size_t(0));
      auto src = nctest::make_input(d, me, total_send, 9);
      std::vector<uint8_t> dst(total_recv * es + 1);
      NC_CHECK_OK(g.all_to_all(src.data(), sends, dst.data(), recvs, d));
      size_t off = 0;
      for (int p = 0; p < n; ++p) {
        size_t peer_total = 0, peer_off = 0;
        for (int q = 0; q < n; ++q) {
          if (q == me) peer_off = peer_total;
          peer_total += split(p, q);
        }
        const auto peer = nctest::make_input(d, p, peer_total, 9);
        NC_CHECK(std::memcmp(dst.data() + off * es, peer.data() + peer_off * es, split(p, me) * es) == 0,
                 "all_to_all " + at + " from rank " + std::to_string(p));
        off += split(p, me);
      }
      NC_CHECK_OK(g.barrier());
    }
  }
  return "";
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceEveryDTypeAndOpThreads) {
  nctest::Options o;
  o.size = GetParam();
  const auto results = nctest::run_threads(o, all_reduce_body);
  EXPECT_EQ(nctest::failures(results), "");
}

TEST_P(Collectives, DataMovementThreads) {
  nctest::Options o;
  o.size = GetParam();
  EXPECT_EQ(nctest::failures(nctest::run_threads(o, data_movement_body)), "");
}

TEST_P(Collectives, AllReduceEveryDTypeAndOpProcesses) {
  nctest::Options o;
  o.size = GetParam();
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, all_reduce_body)), "");
}

TEST_P(Collectives, DataMovementProcesses) {
  nctest::Options o;
  o.size = GetParam();
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, data_movement_body)), "");
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Values(1, 2, 3, 4, 5, 8),
                         [](const auto& info) { return "ranks" + std::to_string(info.param); });

// Many small all_reduces in a row: the deferred releases and the staging reuse.
TEST(CollectivesSequence, ManySmallAllReducesKeepOrder) {
  nctest::Options o;
  o.size = 4;
  const auto results = nctest::run_processes(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    for (int it = 0; it < 2000; ++it) {
      int64_t v = it * 10 + c.rank, out = 0;
      NC_CHECK_OK(c.group->all_reduce(&v, &out, 1, DType::kInt64, ReduceOp::kSum));
      NC_CHECK(out == it * 40 + 6, "iteration " + std::to_string(it) + ": " + std::to_string(out));
    }
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

}  // namespace
