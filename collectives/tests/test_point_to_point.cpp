// send / recv: ordering, long messages in chunks, both ranks sending first,
// mismatches reported to both sides, a peer that never sends. Posted
// messages (isend/irecv + progress): long ones both ways and around a ring
// posted sends first, a progress thread woken by posts, their errors.
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

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

// Drives progress() until every posted message ended; "" or what failed.
std::string finish_posted(Group& g, const std::vector<uint64_t>& ids, std::vector<Status>* out) {
  std::vector<Group::Completion> done;
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  while (g.progress(&done) > 0) {
    NC_CHECK(std::chrono::steady_clock::now() < give_up, "posted messages did not end");
    g.wait_for_peers(std::chrono::steady_clock::now() + 1s);
  }
  out->assign(ids.size(), Status(Code::kSystemError, "never ended"));
  for (const auto& c : done) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] == c.id) (*out)[i] = c.status;
    }
  }
  return "";
}

// Every rank posts its sends (to both neighbours, a message each way on
// every pair at 2 ranks) before its receives: long messages would block a
// blocking send; posted ones move together.
TEST(PointToPoint, PostedLongMessagesBothWaysAndRing) {
  for (bool processes : {false, true}) {
    for (int size : {2, 4}) {
      nctest::Options o;
      o.size = size;
      auto body = [](Ctx& c) -> std::string {
        NC_NEED_GROUP(c);
        const int n = c.group->size(), me = c.rank;
        const int next = (me + 1) % n, prev = (me + n - 1) % n;
        for (size_t count : {size_t(0), size_t(1), size_t(16385), size_t(300000)}) {
          auto to_next = nctest::make_input(DType::kFloat32, me, count, 1);
          auto to_prev = nctest::make_input(DType::kBFloat16, me, count, 2);
          std::vector<uint8_t> from_prev(count * 4 + 1), from_next(count * 2 + 1);
          std::vector<uint64_t> ids(4);
          NC_CHECK_OK(c.group->isend(to_next.data(), count, DType::kFloat32, next, 1, &ids[0]));
          NC_CHECK_OK(c.group->isend(to_prev.data(), count, DType::kBFloat16, prev, 2, &ids[1]));
          NC_CHECK_OK(c.group->irecv(from_prev.data(), count, DType::kFloat32, prev, 1, &ids[2]));
          NC_CHECK_OK(c.group->irecv(from_next.data(), count, DType::kBFloat16, next, 2, &ids[3]));
          std::vector<Status> statuses;
          const std::string err = finish_posted(*c.group, ids, &statuses);
          NC_CHECK(err.empty(), err);
          for (const Status& s : statuses) NC_CHECK(s.ok(), s.to_string());
          auto want_prev = nctest::make_input(DType::kFloat32, prev, count, 1);
          auto want_next = nctest::make_input(DType::kBFloat16, next, count, 2);
          NC_CHECK(std::memcmp(from_prev.data(), want_prev.data(), count * 4) == 0,
                   "float32 message of " + std::to_string(count) + " from the previous rank");
          NC_CHECK(std::memcmp(from_next.data(), want_next.data(), count * 2) == 0,
                   "bfloat16 message of " + std::to_string(count) + " from the next rank");
        }
        // A blocking send behind a posted one keeps their order, and moves
        // the posted receive that lets the peer take its first message.
        float a = 1.f + me, b = 2.f + me, got_a = 0, got_b = 0;
        std::vector<uint64_t> posted(2);
        std::vector<Status> statuses;
        NC_CHECK_OK(c.group->isend(&a, 1, DType::kFloat32, next, 7, &posted[0]));
        NC_CHECK_OK(c.group->irecv(&got_a, 1, DType::kFloat32, prev, 7, &posted[1]));
        NC_CHECK_OK(c.group->send(&b, 1, DType::kFloat32, next, 8));
        NC_CHECK_OK(c.group->recv(&got_b, 1, DType::kFloat32, prev, 8));
        const std::string err = finish_posted(*c.group, posted, &statuses);
        NC_CHECK(err.empty(), err);
        for (const Status& s : statuses) NC_CHECK(s.ok(), s.to_string());
        NC_CHECK(got_a == 1.f + prev && got_b == 2.f + prev, "order of a posted and a blocking send");
        NC_CHECK_OK(c.group->barrier());
        return "";
      };
      const auto results = processes ? nctest::run_processes(o, body) : nctest::run_threads(o, body);
      EXPECT_EQ(nctest::failures(results), "") << (processes ? "processes" : "threads") << " " << size;
    }
  }
}

// A progress thread sleeping in wait_for_peers() while its rank posts under
// a lock, as the torch layer drives the group: wake() makes it see a post at
// once (its sleeps here would last 20 s otherwise).
TEST(PointToPoint, ProgressThreadWokenByPosts) {
  nctest::Options o;
  o.size = 2;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    const int peer = 1 - c.rank;
    std::mutex mu;
    std::vector<Group::Completion> done;
    size_t expected = 0;
    bool stop = false;
    std::thread progress([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (!stop) {
        c.group->progress(&done);
        lock.unlock();
        c.group->wait_for_peers(std::chrono::steady_clock::now() + 20s);
        lock.lock();
      }
    });
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> out(100000, 1.f + c.rank), in(100000);
    for (int i = 0; i < 4; ++i) {
      uint64_t s = 0, r = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!c.group->isend(out.data(), out.size(), DType::kFloat32, peer, i, &s).ok() ||
            !c.group->irecv(in.data(), in.size(), DType::kFloat32, peer, i, &r).ok()) {
          break;
        }
        expected += 2;
      }
      c.group->wake();
      for (;;) {  // bounded: messages end at the group's timeout
        {
          std::lock_guard<std::mutex> lock(mu);
          if (done.size() == expected) break;
        }
        std::this_thread::sleep_for(100us);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    c.group->wake();
    progress.join();
    const auto took = std::chrono::steady_clock::now() - start;
    NC_CHECK(expected == 8 && done.size() == 8, "posted " + std::to_string(expected));
    for (const auto& d : done) NC_CHECK(d.status.ok(), d.status.to_string());
    NC_CHECK(in[0] == 1.f + peer && in.back() == 1.f + peer, "data from the peer");
    NC_CHECK(took < 10s, "took " + std::to_string(std::chrono::duration<double>(took).count()) + " s");
    return "";
  });
  EXPECT_EQ(nctest::failures(results), "");
}

// Posted messages keep the blocking ones' errors: a mismatch on both sides,
// a timeout naming the silent peer (the group is then broken), and abort()
// from another thread ending a rank's wait.
TEST(PointToPoint, PostedMismatchTimeoutAndAbort) {
  nctest::Options o;
  o.size = 2;
  o.timeout = 300ms;
  const auto results = nctest::run_threads(o, [](Ctx& c) -> std::string {
    NC_NEED_GROUP(c);
    std::vector<float> buf(200000, 1.f);
    std::vector<uint64_t> ids(1);
    std::vector<Status> st;
    if (c.rank == 0) {
      NC_CHECK_OK(c.group->isend(buf.data(), buf.size(), DType::kFloat32, 1, 5, &ids[0]));
    } else {
      NC_CHECK_OK(c.group->irecv(buf.data(), 10, DType::kInt32, 0, 5, &ids[0]));
    }
    std::string err = finish_posted(*c.group, ids, &st);
    NC_CHECK(err.empty(), err);
    if (c.rank == 0) {
      NC_CHECK(st[0].code() == Code::kPeerError && st[0].message().find("refused") != std::string::npos,
               st[0].to_string());
    } else {
      NC_CHECK(st[0].code() == Code::kMismatch &&
                   st[0].message().find("expected 10 int32 with tag 5, rank 0 sent 200000 float32 with tag 5") !=
                       std::string::npos,
               st[0].to_string());
    }
    NC_CHECK_OK(c.group->barrier());
    if (c.rank == 1) {
      // Rank 0 never sends: a posted receive times out; later posts are refused.
      NC_CHECK_OK(c.group->irecv(buf.data(), 1, DType::kFloat32, 0, 0, &ids[0]));
      err = finish_posted(*c.group, ids, &st);
      NC_CHECK(err.empty(), err);
      NC_CHECK(st[0].code() == Code::kTimeout &&
                   st[0].message().find("waiting for rank 0 to send") != std::string::npos,
               st[0].to_string());
      NC_CHECK(c.group->isend(buf.data(), 1, DType::kFloat32, 0, 0, &ids[0]).code() == Code::kAborted,
               "post after the timeout");
      return "";
    }
    // Rank 0 aborts its own wait for rank 1, which never sends, from another thread.
    NC_CHECK_OK(c.group->irecv(buf.data(), 1, DType::kFloat32, 1, 9, &ids[0]));
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      c.group->abort();
    });
    err = finish_posted(*c.group, ids, &st);
    aborter.join();
    NC_CHECK(err.empty(), err);
    NC_CHECK(st[0].code() == Code::kAborted &&
                 st[0].message().find("aborted while waiting for rank 1 to send") != std::string::npos,
             st[0].to_string());
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
