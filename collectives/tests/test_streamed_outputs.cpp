// Outputs of kStreamOutputBytes and more are written with non-temporal
// stores: the copy itself at every alignment and length, and each collective
// that streams, with an odd count and an output that starts off a 16-byte
// boundary, against the reference.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "harness.hpp"
#include "reference.hpp"
#include "stream_copy.hpp"

namespace {

using namespace neuroncoll;

TEST(StreamBytes, EveryAlignmentAndLength) {
  std::vector<uint8_t> src(600), dst(640);
  std::iota(src.begin(), src.end(), uint8_t{1});
  for (size_t src_off = 0; src_off < 16; src_off += 5) {
    for (size_t dst_off = 0; dst_off < 17; ++dst_off) {
      for (size_t len : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(63),
                         size_t(64), size_t(65), size_t(200), size_t(583)}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        algorithms::stream_bytes(dst.data() + dst_off, src.data() + src_off, len);
        ASSERT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, len), 0)
            << "src+" << src_off << " dst+" << dst_off << " len " << len;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (i < dst_off || i >= dst_off + len) {
            ASSERT_EQ(dst[i], 0xEE) << "wrote byte " << i;
          }
        }
      }
    }
  }
  algorithms::stream_bytes(nullptr, nullptr, 0);
}

// float32 elements per rank whose outputs cross the streaming threshold.
constexpr size_t kGatherCount = algorithms::kStreamOutputBytes / 4 / 3 + 7;  // x3 ranks
constexpr size_t kReduceCount = algorithms::kStreamOutputBytes / 4 + 5;

std::string streamed_body(nctest::Ctx& c) {
  NC_NEED_GROUP(c);
  Group& g = *c.group;
  const int n = g.size(), me = c.rank;
  const DType d = DType::kFloat32;
  // +4 bytes: outputs start off a 16-byte boundary.
  std::vector<std::vector<uint8_t>> inputs, wide;
  for (int r = 0; r < n; ++r) inputs.push_back(nctest::make_input(d, r, kGatherCount));
  std::vector<uint8_t> gathered(n * kGatherCount * 4 + 8, 0xAB);
  NC_CHECK_OK(g.all_gather(inputs[me].data(), gathered.data() + 4, kGatherCount, d));
  for (int p = 0; p < n; ++p) {
    NC_CHECK(std::memcmp(gathered.data() + 4 + p * kGatherCount * 4, inputs[p].data(),
                         kGatherCount * 4) == 0,
             "all_gather: rank " + std::to_string(p) + "'s part");
  }
  NC_CHECK(gathered[3] == 0xAB && gathered[4 + n * kGatherCount * 4] == 0xAB,
           "all_gather wrote outside its output");

  for (int r = 0; r < n; ++r) wide.push_back(nctest::make_input(d, r, n * kReduceCount, 3));
  std::vector<uint8_t> part(kReduceCount * 4 + 8, 0xAB);
  NC_CHECK_OK(g.reduce_scatter(wide[me].data(), part.data() + 4, kReduceCount, d, ReduceOp::kSum));
  const auto want_rs = nctest::reference_reduce(d, ReduceOp::kSum, wide, kReduceCount, me * kReduceCount);
  std::string diff = nctest::compare_bytes(d, part.data() + 4, want_rs.data(), kReduceCount,
                                           "reduce_scatter");
  NC_CHECK(diff.empty(), diff);
  NC_CHECK(part[3] == 0xAB && part[4 + kReduceCount * 4] == 0xAB,
           "reduce_scatter wrote outside its output");

  std::vector<std::vector<uint8_t>> single;
  for (int r = 0; r < n; ++r) single.push_back(nctest::make_input(d, r, kReduceCount, 5));
  std::vector<uint8_t> reduced(kReduceCount * 4 + 8, 0xAB);
  NC_CHECK_OK(g.all_reduce(single[me].data(), reduced.data() + 4, kReduceCount, d, ReduceOp::kMax));
  const auto want_ar = nctest::reference_reduce(d, ReduceOp::kMax, single, kReduceCount);
  diff = nctest::compare_bytes(d, reduced.data() + 4, want_ar.data(), kReduceCount,
                               "all_reduce out of place");
  NC_CHECK(diff.empty(), diff);

  std::vector<uint8_t> bcast = me == 1 ? single[1] : std::vector<uint8_t>(kReduceCount * 4, 0);
  NC_CHECK_OK(g.broadcast(bcast.data(), kReduceCount, d, 1));
  NC_CHECK(std::memcmp(bcast.data(), single[1].data(), kReduceCount * 4) == 0,
           "broadcast from rank 1");
  return "";
}

TEST(StreamedOutputs, CollectivesMatchTheReference) {
  nctest::Options o;
  o.size = 3;
  o.staging_bytes = 1 << 20;  // the default: rounds of a realistic size
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, streamed_body)), "");
}

}  // namespace
