// Bad input and faults: mismatches reported on every rank (and the group
// still usable), invalid arguments on one rank, ranks that never arrive or
// are killed (survivors time out naming them, within the timeout), and no
// segment left in /dev/shm afterwards.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "harness.hpp"

namespace {

using namespace neuroncoll;
using namespace std::chrono_literals;
using nctest::Ctx;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Faults, CountMismatchOnEveryRankThenUsable) {
  nctest::Options o;
  o.size = 3;
  const auto results = nctest::run_processes(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<float> in(20, 1.f), out(20);
    const size_t count = c.rank == 1 ? 12 : 10;
    Status s = c.group->all_reduce(in.data(), out.data(), count, DType::kFloat32, ReduceOp::kSum);
    NC_CHECK(s.code() == Code::kMismatch, s.to_string());
    NC_CHECK(has(s.message(), "rank 1: all_reduce float32 SUM count 12"), s.message());
    NC_CHECK(has(s.message(), "rank 0: all_reduce float32 SUM count 10"), s.message());
    NC_CHECK_OK(c.group->all_reduce(in.data(), out.data(), 20, DType::kFloat32, ReduceOp::kSum));
    NC_CHECK(out[19] == 3.f, "after the mismatch");
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(Faults, DTypeOpAndKindMismatch) {
  nctest::Options o;
  o.size = 2;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<int32_t> in(8, 1), out(16);
    Status s = c.group->all_reduce(in.data(), out.data(), 8,
                                   c.rank ? DType::kInt32 : DType::kFloat32, ReduceOp::kSum);
    NC_CHECK(s.code() == Code::kMismatch && has(s.message(), "int32") && has(s.message(), "float32"),
             s.to_string());
    s = c.group->all_reduce(in.data(), out.data(), 8, DType::kInt32,
                            c.rank ? ReduceOp::kMax : ReduceOp::kMin);
    NC_CHECK(s.code() == Code::kMismatch && has(s.message(), "MAX") && has(s.message(), "MIN"),
             s.to_string());
    s = c.rank ? c.group->broadcast(in.data(), 8, DType::kInt32, 0)
               : c.group->all_gather(in.data(), out.data(), 8, DType::kInt32);
    NC_CHECK(s.code() == Code::kMismatch && has(s.message(), "broadcast") &&
                 has(s.message(), "all_gather"),
             s.to_string());
    s = c.group->broadcast(in.data(), 8, DType::kInt32, c.rank);
    NC_CHECK(s.code() == Code::kMismatch && has(s.message(), "root 1"), s.to_string());
    NC_CHECK_OK(c.group->barrier());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

// A rank that failed elsewhere (between hosts) ends its peers' collective
// with its message; messages name ranks by their labels; the group goes on.
TEST(Faults, FailReachesPeersByLabel) {
  nctest::Options o;
  o.size = 3;
  o.rank_labels = {4, 6, 9};
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<float> buf(5000, 1.f);
    Status s = c.rank == 0 ? c.group->fail("between hosts: connection reset")
                           : c.group->broadcast(buf.data(), buf.size(), DType::kFloat32, 0);
    if (c.rank == 0) {
      NC_CHECK_OK(s);
    } else {
      NC_CHECK(s.code() == Code::kPeerError &&
                   has(s.message(), "rank 4: between hosts: connection reset"),
               s.to_string());
    }
    const size_t count = c.rank == 2 ? 3 : 2;
    s = c.group->all_reduce(buf.data(), buf.data(), count, DType::kFloat32, ReduceOp::kSum);
    NC_CHECK(s.code() == Code::kMismatch && has(s.message(), "rank 9: all_reduce float32 SUM count 3"),
             s.to_string());
    NC_CHECK_OK(c.group->all_reduce(buf.data(), buf.data(), 2, DType::kFloat32, ReduceOp::kSum));
    NC_CHECK(buf[1] == 3.f, "after the failure");
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(Faults, InvalidArgumentsOnOneRankReachEveryRank) {
  nctest::Options o;
  o.size = 3;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<float> buf(4, 1.f);
    Status s = c.group->all_reduce(buf.data(), buf.data(), 4, DType::kFloat32,
                                   c.rank == 2 ? ReduceOp::kBitwiseXor : ReduceOp::kSum);
    if (c.rank == 2) {
      NC_CHECK(s.code() == Code::kInvalidArgument && has(s.message(), "BXOR is not defined for dtype float32"),
               s.to_string());
    } else {
      NC_CHECK(s.code() == Code::kPeerError && has(s.message(), "rank 2"), s.to_string());
    }
    s = c.group->broadcast(c.rank == 0 ? nullptr : buf.data(), 4, DType::kFloat32, 0);
    NC_CHECK(c.rank == 0 ? s.code() == Code::kInvalidArgument : s.code() == Code::kPeerError,
             s.to_string());
    s = c.group->scatter(buf.data(), buf.data(), 1, DType::kFloat32, 7);
    NC_CHECK(s.code() == Code::kInvalidArgument && has(s.message(), "root 7"), s.to_string());
    NC_CHECK_OK(c.group->all_reduce(buf.data(), buf.data(), 4, DType::kFloat32, ReduceOp::kSum));
    NC_CHECK(buf[0] == 3.f, "after invalid calls");
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(Faults, AllToAllSplitMismatch) {
  nctest::Options o;
  o.size = 2;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<float> in(8), out(8);
    std::vector<size_t> sends = {2, 2}, recvs = {2, c.rank == 0 ? size_t(3) : size_t(2)};
    Status s = c.group->all_to_all(in.data(), sends, out.data(), recvs, DType::kFloat32);
    NC_CHECK(s.code() == Code::kMismatch &&
                 has(s.message(), "rank 1 sends 2 to rank 0, which expects 3"),
             s.to_string());
    NC_CHECK_OK(c.group->barrier());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(Faults, RankThatNeverArrivesTimesOutNamingIt) {
  nctest::Options o;
  o.size = 4;
  o.timeout = 500ms;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    if (c.rank == 2) return "";  // leaves without calling
    float v = 1.f;
    const auto t0 = std::chrono::steady_clock::now();
    Status s = c.group->all_reduce(&v, &v, 1, DType::kFloat32, ReduceOp::kSum);
    const auto took = std::chrono::steady_clock::now() - t0;
    NC_CHECK(s.code() == Code::kTimeout, s.to_string());
    NC_CHECK(has(s.message(), "waiting for rank(s) 2 "), s.message());
    NC_CHECK(took < 3s, "took too long");
    s = c.group->barrier();
    NC_CHECK(s.code() == Code::kAborted, s.to_string());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

// abort() from another thread releases a rank waiting in a collective or a
// receive at once (not at the timeout); the group then refuses every call.
TEST(Faults, AbortReleasesWaitingRankAtOnce) {
  nctest::Options o;
  o.size = 2;
  o.timeout = 30s;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    if (c.rank == 1) return "";  // never calls
    std::vector<float> buf(100, 1.f);
    const auto start = std::chrono::steady_clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      c.group->abort();
    });
    Status s = c.group->all_reduce(buf.data(), buf.data(), buf.size(), DType::kFloat32, ReduceOp::kSum);
    aborter.join();
    const auto took = std::chrono::steady_clock::now() - start;
    NC_CHECK(s.code() == Code::kAborted && has(s.message(), "aborted while waiting for rank(s) 1"),
             s.to_string());
    NC_CHECK(took < 5s, "abort took " + std::to_string(std::chrono::duration<double>(took).count()) + " s");
    s = c.group->recv(buf.data(), 4, DType::kFloat32, 1);
    NC_CHECK(s.code() == Code::kAborted, s.to_string());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(Faults, KilledRankTimesOutNamingItAndLeavesNoSegment) {
  nctest::Options o;
  o.size = 3;
  o.timeout = 1000ms;
  o.name = "killed-run";
  const auto results = nctest::run_processes(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<double> buf(100000, 1.0);  // the chunked path
    NC_CHECK_OK(c.group->all_reduce(buf.data(), buf.data(), buf.size(), DType::kFloat64, ReduceOp::kSum));
    if (c.rank == 1) ::kill(::getpid(), SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = c.group->all_reduce(buf.data(), buf.data(), buf.size(), DType::kFloat64, ReduceOp::kSum);
    NC_CHECK(s.code() == Code::kTimeout && has(s.message(), "rank(s) 1 "), s.to_string());
    NC_CHECK(std::chrono::steady_clock::now() - t0 < 4s, "took too long");
    return "";
  });
  EXPECT_EQ(results[0], "");
  EXPECT_TRUE(has(results[1], "died of signal 9")) << results[1];
  EXPECT_EQ(results[2], "");
  for (const std::string& name : nctest::shm_leftovers()) EXPECT_FALSE(has(name, "killed-run")) << name;
}

TEST(Faults, CreationWithMissingRankTimesOutAndRemovesSegment) {
  nctest::Options o;
  o.size = 3;
  o.timeout = 500ms;
  o.name = "missing-at-create";
  o.skip_create_rank = 1;
  const auto results = nctest::run_processes(o, [](Ctx& c) -> std::string {
    if (c.rank == 1) return "";
    NC_CHECK(c.create_status.code() == Code::kTimeout, c.create_status.to_string());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
  for (const std::string& name : nctest::shm_leftovers()) EXPECT_FALSE(has(name, "missing-at-create")) << name;
}

TEST(Faults, GroupSizeMismatchAtCreate) {
  nctest::Options o;
  o.size = 2;
  o.timeout = 500ms;
  std::shared_ptr<Store> store;
  char tmpl[] = "/tmp/neuroncoll-test-XXXXXX";
  ASSERT_TRUE(make_file_store(::mkdtemp(tmpl), &store).ok());
  std::unique_ptr<Group> g;
  GroupOptions go;
  go.store = store;
  go.rank = 3;
  go.size = 2;
  Status s = Group::create(go, &g);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(has(s.message(), "rank 3 outside a group of size 2")) << s.message();
}

}  // namespace

namespace {

// A process killed while a group forms leaves its segment's name; the next
// group created on the host removes it.
TEST(Faults, CrashDuringCreationLeftoverIsSweptByTheNextGroup) {
  nctest::Options o;
  o.size = 2;
  // The name a creator killed inside Group::create leaves (its pid is gone).
  const std::string stale = "/neuroncoll-" + nctest::test_prefix() + "stale-n" +
                            std::to_string([] {
                              struct stat st {};
                              return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
                            }()) +
                            "-999999999-00000000";
  int fd = ::shm_open(stale.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  o.name = "after-crash";
  EXPECT_EQ(nctest::failures(nctest::run_threads(o, [](Ctx& c) -> std::string {
              NC_NEED_GROUP(c);
              return "";
            })),
            "");
  EXPECT_NE(::access(("/dev/shm" + stale).c_str(), F_OK), 0) << stale << " not swept";
}

}  // namespace
