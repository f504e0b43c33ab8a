// send / recv: ordering, long messages in chunks, both ranks sending first,
// mismatches reported to both sides, a peer that never sends.
#include <gtest/gtest.h>

#include "harness.hpp"
#include "reference.hpp"

namespace {

using namespace neuroncoll;
using namespace std::chrono_literals;
using nctest::Ctx;

TEST(PointToPoint, RingOfMessagesShortAndLong) {
  for (bool processes : {false, true}) {
    nctest::Options o;
    o.size = 4;
    auto body = [](Ctx& c) -> std::string {
      NC_NEED_GROUP(c);
      const int n = c.group->size(), me = c.rank;
      const int next = (me + 1) % n, prev = (me + n - 1) % n;
      for (size_t count : {size_t(0), size_t(1), size_t(1001), size_t(70000)}) {
        for (int it = 0; it < 3; ++it) {
          auto mine = nctest::make_input(DType::kFloat32, me, count, it);
          auto want = nctest::make_input(DType::kFloat32, prev, count, it);
          std::vector<uint8_t> got(count * 4 + 1);
          // Even ranks send first, odd ranks receive first: no deadlock for
          // long messages, and short ones are buffered either way.
          if (me % 2 == 0) {
            NC_CHECK_OK(c.group->send(mine.data(), count, DType::kFloat32, next, it));
            NC_CHECK_OK(c.group->recv(got.data(), count, DType::kFloat32, prev, it));
          } else {
            NC_CHECK_OK(c.group->recv(got.data(), count, DType::kFloat32, prev, it));
            NC_CHECK_OK(c.group->send(mine.data(), count, DType::kFloat32, next, it));
          }
          NC_CHECK(std::memcmp(got.data(), want.data(), count * 4) == 0,
                   "message of " + std::to_string(count) + " from rank " + std::to_string(prev));
        }
      }
      NC_CHECK_OK(c.group->barrier());
      return "";
    };
    const auto results = processes ? nctest::run_processes(o, body) : nctest::run_threads(o, body);
    EXPECT_EQ(nctest::failures(results), "") << (processes ? "processes" : "threads");
  }
}

TEST(PointToPoint, BothSendFirstWhenShort) {
  nctest::Options o;
  o.size = 2;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    const int peer = 1 - c.rank;
    int64_t mine = 100 + c.rank, got = 0;
    NC_CHECK_OK(c.group->send(&mine, 1, DType::kInt64, peer));
    NC_CHECK_OK(c.group->recv(&got, 1, DType::kInt64, peer));
    NC_CHECK(got == 100 + peer, "got " + std::to_string(got));
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(PointToPoint, MismatchReachesBothSides) {
  nctest::Options o;
  o.size = 2;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<float> buf(200000, 1.f);  // several chunks, all drained by the receiver
    if (c.rank == 0) {
      // A long message: the sender learns of the refusal within the send.
      Status s = c.group->send(buf.data(), buf.size(), DType::kFloat32, 1, 5);
      NC_CHECK(s.code() == Code::kPeerError && s.message().find("refused") != std::string::npos, s.to_string());
      // A one-chunk message: at the next send, which is not made.
      NC_CHECK_OK(c.group->send(buf.data(), 3, DType::kFloat32, 1, 6));
      NC_CHECK_OK(c.group->barrier());
      s = c.group->send(buf.data(), 4, DType::kFloat32, 1);
      NC_CHECK(s.code() == Code::kPeerError && s.message().find("not made") != std::string::npos, s.to_string());
      NC_CHECK_OK(c.group->send(buf.data(), 4, DType::kFloat32, 1));
    } else {
      Status s = c.group->recv(buf.data(), 10, DType::kInt32, 0, 5);
      NC_CHECK(s.code() == Code::kMismatch &&
                   s.message().find("expected 10 int32 with tag 5, rank 0 sent 200000 float32 with tag 5") !=
                       std::string::npos,
               s.to_string());
      s = c.group->recv(buf.data(), 3, DType::kFloat32, 0, 7);
      NC_CHECK(s.code() == Code::kMismatch, s.to_string());
      NC_CHECK_OK(c.group->barrier());
      NC_CHECK_OK(c.group->recv(buf.data(), 4, DType::kFloat32, 0));
    }
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(PointToPoint, PeerThatNeverSendsTimesOut) {
  nctest::Options o;
  o.size = 2;
  o.timeout = 300ms;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    if (c.rank == 1) return "";
    float v = 0;
    Status s = c.group->recv(&v, 1, DType::kFloat32, 1);
    NC_CHECK(s.code() == Code::kTimeout && s.message().find("waiting for rank 1 to send") != std::string::npos,
             s.to_string());
    s = c.group->send(&v, 1, DType::kFloat32, 0);
    NC_CHECK(s.code() == Code::kAborted, s.to_string());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

TEST(PointToPoint, InvalidPeer) {
  nctest::Options o;
  o.size = 2;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    float v = 0;
    Status s = c.group->send(&v, 1, DType::kFloat32, c.rank);
    NC_CHECK(s.code() == Code::kInvalidArgument, s.to_string());
    s = c.group->recv(&v, 1, DType::kFloat32, 9);
    NC_CHECK(s.code() == Code::kInvalidArgument, s.to_string());
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

}  // namespace
