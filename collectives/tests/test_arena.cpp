// SharedArena blocks, and all_reduce reading peers' arena buffers directly.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "harness.hpp"
#include "neuroncoll/arena.hpp"
#include "reference.hpp"
#include "transport/arena_registry.hpp"

namespace {

using namespace neuroncoll;
using nctest::Ctx;

TEST(SharedArena, AllocatesAlignedBlocksAndCoalesces) {
  std::unique_ptr<SharedArena> arena;
  ASSERT_TRUE(SharedArena::create(1 << 20, &arena).ok());
  void* a = arena->allocate(1000, 64);
  void* b = arena->allocate(5000, 4096);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
  EXPECT_EQ(arena->allocate(2 << 20, 64), nullptr);
  const auto ref = transport::find_arena(static_cast<char*>(b) + 10, 100);
  EXPECT_NE(ref.uid, 0u);
  EXPECT_EQ(ref.offset, static_cast<size_t>(static_cast<char*>(b) - static_cast<char*>(arena->base())) + 10);
  EXPECT_EQ(transport::find_arena(&ref, sizeof(ref)).uid, 0u);
  arena->deallocate(a);
  arena->deallocate(b);
  EXPECT_EQ(arena->allocated(), 0u);
  void* whole = arena->allocate(1 << 20, 64);  // only possible once everything merged back
  EXPECT_EQ(whole, arena->base());
}

// Freeing a large block gives its pages back: reallocated, they read zero.
TEST(SharedArena, LargeFreedBlocksReturnTheirPages) {
  std::unique_ptr<SharedArena> arena;
  ASSERT_TRUE(SharedArena::create(8 << 20, &arena).ok());
  auto* a = static_cast<unsigned char*>(arena->allocate(4 << 20, 2 << 20));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % (2 << 20), 0u);  // the base is 2 MiB-aligned
  std::memset(a, 0x5a, 4 << 20);
  arena->deallocate(a);
  auto* b = static_cast<unsigned char*>(arena->allocate(4 << 20, 2 << 20));
  ASSERT_EQ(b, a);
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[(4 << 20) - 1], 0);
  arena->deallocate(b);
}

// Large all_reduce with every rank's buffers in an arena of its own: the
// direct path. `mixed`: rank 0 keeps its output outside, so staging is used.
std::string direct_body(Ctx& c, bool mixed) {
  NC_NEED_GROUP(c);
  const int n = c.group->size();
  std::unique_ptr<SharedArena> arena;
  NC_CHECK_OK(SharedArena::create(8 << 20, &arena));
  for (DType d : {DType::kFloat32, DType::kBFloat16, DType::kInt32}) {
    for (size_t count : {size_t(50001), size_t(nctest::kSlowBuild ? 70000 : 300000)}) {
      const size_t bytes = count * dtype_size(d);
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(nctest::make_input(d, r, count));
      const auto want = nctest::reference_reduce(d, ReduceOp::kSum, inputs, count);
      auto* in = static_cast<uint8_t*>(arena->allocate(bytes, 64));
      NC_CHECK(in != nullptr, "arena full");
      std::vector<uint8_t> outside(bytes);
      auto* out = mixed && c.rank == 0 ? outside.data() : static_cast<uint8_t*>(arena->allocate(bytes, 64));
      std::memcpy(in, inputs[c.rank].data(), bytes);
      NC_CHECK_OK(c.group->all_reduce(in, out, count, d, ReduceOp::kSum));
      std::string diff = nctest::compare_bytes(d, out, want.data(), count, "direct all_reduce");
      NC_CHECK(diff.empty(), diff);
      NC_CHECK_OK(c.group->all_reduce(in, in, count, d, ReduceOp::kSum));
      diff = nctest::compare_bytes(d, in, want.data(), count, "direct all_reduce in place");
      NC_CHECK(diff.empty(), diff);
      const GroupStats st = c.group->stats();
      if (mixed) {
        // Out of place went through staging; in place (both in arenas) was direct.
        NC_CHECK(st.direct_all_reduces > 0 && st.chunked_all_reduces > 0, "expected both paths");
      } else {
        NC_CHECK(st.direct_all_reduces > 0 && st.chunked_all_reduces == 0, "expected the direct path");
      }
      arena->deallocate(in);
      if (out != outside.data()) arena->deallocate(out);
    }
  }
  return "";
}

// The processes are forked after the threads test made arenas in the parent:
// their arena ids must still differ.
TEST(DirectAccess, AllReduceFromArenasProcesses) {
  { std::unique_ptr<SharedArena> a; ASSERT_TRUE(SharedArena::create(4096, &a).ok()); }
  nctest::Options o;
  o.size = 3;
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, [](Ctx& c) { return direct_body(c, false); })), "");
}

TEST(DirectAccess, AllReduceFromArenasThreads) {
  nctest::Options o;
  o.size = 4;
  EXPECT_EQ(nctest::failures(nctest::run_threads(o, [](Ctx& c) { return direct_body(c, false); })), "");
}

// broadcast from an arena, all_gather from arenas (also in place: the input
// is this rank's block of the output), and the staged fallbacks when the
// buffers are ordinary memory.
std::string direct_copies_body(Ctx& c) {
  NC_NEED_GROUP(c);
  const int n = c.group->size(), me = c.rank;
  std::unique_ptr<SharedArena> arena;
  NC_CHECK_OK(SharedArena::create(8 << 20, &arena));
  const size_t count = 50001, bytes = count * 4;
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(nctest::make_input(DType::kFloat32, r, count));
  auto* buf = static_cast<uint8_t*>(arena->allocate(bytes, 64));
  auto* gathered = static_cast<uint8_t*>(arena->allocate(n * bytes, 64));
  for (bool in_arena : {true, false}) {
    std::vector<uint8_t> plain(bytes), plain_out(n * bytes);
    uint8_t* b = in_arena ? buf : plain.data();
    uint8_t* g = in_arena ? gathered : plain_out.data();
    const int root = n - 1;
    std::memcpy(b, inputs[me == root ? root : 0].data(), bytes);
    if (me != root) std::memset(b, 0, bytes);
    NC_CHECK_OK(c.group->broadcast(b, count, DType::kFloat32, root));
    NC_CHECK(std::memcmp(b, inputs[root].data(), bytes) == 0, "broadcast");
    std::memcpy(b, inputs[me].data(), bytes);
    NC_CHECK_OK(c.group->all_gather(b, g, count, DType::kFloat32));
    for (int p = 0; p < n; ++p) NC_CHECK(std::memcmp(g + p * bytes, inputs[p].data(), bytes) == 0, "all_gather");
    std::memset(g, 0, n * bytes);
    std::memcpy(g + me * bytes, inputs[me].data(), bytes);
    NC_CHECK_OK(c.group->all_gather(g + me * bytes, g, count, DType::kFloat32));
    for (int p = 0; p < n; ++p) NC_CHECK(std::memcmp(g + p * bytes, inputs[p].data(), bytes) == 0, "all_gather in place");
    const GroupStats st = c.group->stats();
    NC_CHECK(st.direct_broadcasts == 1 && st.direct_all_gathers == 2,
             "direct counts " + std::to_string(st.direct_broadcasts) + " " + std::to_string(st.direct_all_gathers));
  }
  return "";
}

TEST(DirectAccess, BroadcastAndAllGatherFromArenas) {
  nctest::Options o;
  o.size = 3;
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, direct_copies_body)), "");
  EXPECT_EQ(nctest::failures(nctest::run_threads(o, direct_copies_body)), "");
}

// reduce_scatter from arenas: each rank reduces its part straight from every
// rank's input, for a few ops and dtypes, in place (the output is this rank's
// part of its input), and for an output large enough to be streamed; the same
// calls on ordinary memory are staged.
std::string direct_reduce_scatter_body(Ctx& c) {
  NC_NEED_GROUP(c);
  const int n = c.group->size(), me = c.rank;
  std::unique_ptr<SharedArena> arena;
  const size_t large = (size_t(8) << 20) / 4 + 17;  // a streamed output (kStreamOutputBytes)
  NC_CHECK_OK(SharedArena::create(n * large * 4 + large * 4 + (1 << 20), &arena));
  uint64_t expected_direct = 0;
  for (bool in_arena : {true, false}) {
    for (auto [d, op, count] : {std::tuple{DType::kFloat32, ReduceOp::kSum, size_t(50001)},
                                std::tuple{DType::kBFloat16, ReduceOp::kPremulSum, size_t(70001)},
                                std::tuple{DType::kInt32, ReduceOp::kMax, size_t(50001)},
                                std::tuple{DType::kFloat32, ReduceOp::kSum, large}}) {
      const size_t es = dtype_size(d);
      std::vector<std::vector<uint8_t>> wide;
      for (int r = 0; r < n; ++r) wide.push_back(nctest::make_input(d, r, n * count));
      const auto want = nctest::reference_reduce(d, op, wide, count, me * count);
      std::vector<uint8_t> plain_in(n * count * es), plain_out(count * es);
      auto* in = in_arena ? static_cast<uint8_t*>(arena->allocate(n * count * es, 64)) : plain_in.data();
      auto* out = in_arena ? static_cast<uint8_t*>(arena->allocate(count * es, 64)) : plain_out.data();
      NC_CHECK(in && out, "arena full");
      const double scale = op == ReduceOp::kPremulSum ? nctest::premul_factor(me) : 1.0;
      const std::string at = std::string(in_arena ? "arena " : "plain ") + dtype_name(d) + " count " +
                             std::to_string(count);
      std::memcpy(in, wide[me].data(), n * count * es);
      NC_CHECK_OK(c.group->reduce_scatter(in, out, count, d, op, scale));
      std::string diff = nctest::compare_bytes(d, out, want.data(), count, "reduce_scatter " + at);
      NC_CHECK(diff.empty(), diff);
      NC_CHECK_OK(c.group->reduce_scatter(in, in + me * count * es, count, d, op, scale));
      diff = nctest::compare_bytes(d, in + me * count * es, want.data(), count, "in place " + at);
      NC_CHECK(diff.empty(), diff);
      if (in_arena) {
        expected_direct += 2;
        arena->deallocate(in);
        arena->deallocate(out);
      }
      const GroupStats st = c.group->stats();
      NC_CHECK(st.direct_reduce_scatters == expected_direct,
               at + ": direct reduce_scatters " + std::to_string(st.direct_reduce_scatters) + ", expected " +
                   std::to_string(expected_direct));
    }
  }
  return "";
}

TEST(DirectAccess, ReduceScatterFromArenas) {
  nctest::Options o;
  o.size = 3;
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, direct_reduce_scatter_body)), "");
  o.size = 2;
  EXPECT_EQ(nctest::failures(nctest::run_threads(o, direct_reduce_scatter_body)), "");
}

// A rank whose arena peers cannot map (here the last rank's memfd number now
// names another file, as a peer in another pid namespace would open the wrong
// /proc entry): every rank agrees, the collective and later ones go through
// staging, and results are right.
std::string unmappable_body(Ctx& c) {
  NC_NEED_GROUP(c);
  const int n = c.group->size(), me = c.rank;
  std::unique_ptr<SharedArena> arena;
  NC_CHECK_OK(SharedArena::create(8 << 20, &arena));
  if (me == n - 1) {
    const int other = ::memfd_create("not-the-arena", MFD_CLOEXEC);
    NC_CHECK(other >= 0, "memfd_create");
    NC_CHECK(::dup2(other, transport::find_arena(arena->base(), 1).fd) >= 0, "dup2");
    ::close(other);
  }
  const size_t count = 50001, bytes = count * 4;
  std::vector<std::vector<uint8_t>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(nctest::make_input(DType::kFloat32, r, count));
  const auto want = nctest::reference_reduce(DType::kFloat32, ReduceOp::kSum, inputs, count);
  auto* in = static_cast<uint8_t*>(arena->allocate(bytes, 64));
  auto* out = static_cast<uint8_t*>(arena->allocate(n * bytes, 64));
  NC_CHECK(in && out, "arena full");
  for (int k = 0; k < 2; ++k) {
    std::memcpy(in, inputs[me].data(), bytes);
    NC_CHECK_OK(c.group->all_reduce(in, out, count, DType::kFloat32, ReduceOp::kSum));
    std::string diff = nctest::compare_bytes(DType::kFloat32, out, want.data(), count, "all_reduce");
    NC_CHECK(diff.empty(), diff);
  }
  NC_CHECK_OK(c.group->all_gather(in, out, count, DType::kFloat32));
  for (int p = 0; p < n; ++p) NC_CHECK(std::memcmp(out + p * bytes, inputs[p].data(), bytes) == 0, "all_gather");
  std::memcpy(in, inputs[me].data(), bytes);
  NC_CHECK_OK(c.group->broadcast(in, count, DType::kFloat32, n - 1));
  NC_CHECK(std::memcmp(in, inputs[n - 1].data(), bytes) == 0, "broadcast");
  const GroupStats st = c.group->stats();
  NC_CHECK(st.direct_all_reduces == 0 && st.chunked_all_reduces == 2 && st.direct_all_gathers == 0 &&
               st.direct_broadcasts == 0,
           "expected staging throughout: direct " + std::to_string(st.direct_all_reduces) + " chunked " +
               std::to_string(st.chunked_all_reduces));
  arena->deallocate(in);
  arena->deallocate(out);
  return "";
}

TEST(DirectAccess, UnmappablePeerArenaFallsBackToStaging) {
  nctest::Options o;
  o.size = 3;
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, unmappable_body)), "");
}

TEST(DirectAccess, OneRankOutsideAnArenaUsesStaging) {
  nctest::Options o;
  o.size = 2;
  EXPECT_EQ(nctest::failures(nctest::run_processes(o, [](Ctx& c) { return direct_body(c, true); })), "");
}

}  // namespace
