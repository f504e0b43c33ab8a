// Copies: the four kinds, ordering with queued work, and validation.
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "support.hpp"

using nrt_test::Gate;

namespace {

class Copies : public nrt_test::RuntimeTest {
 protected:
  void SetUp() override {
    ASSERT_EQ(nrtMalloc(&d0, kBytes, 0), nrtSuccess);
    ASSERT_EQ(nrtMalloc(&d0b, kBytes, 0), nrtSuccess);
    ASSERT_EQ(nrtMalloc(&d1, kBytes, 1), nrtSuccess);
    ASSERT_EQ(nrtHostAlloc(&pinned, kBytes), nrtSuccess);
    host.resize(kBytes);
    std::iota(host.begin(), host.end(), static_cast<unsigned char>(1));
  }
  void TearDown() override {
    nrtFree(d0);
    nrtFree(d0b);
    nrtFree(d1);
    nrtFreeHost(pinned);
    RuntimeTest::TearDown();
  }
  static constexpr size_t kBytes = 4096;
  void* d0 = nullptr;
  void* d0b = nullptr;
  void* d1 = nullptr;
  void* pinned = nullptr;
  std::vector<unsigned char> host;
};

}  // namespace

TEST_F(Copies, AllFourKindsSynchronous) {
  ASSERT_EQ(nrtMemcpy(d0, host.data(), kBytes, nrtMemcpyHostToDevice), nrtSuccess);
  ASSERT_EQ(nrtMemcpy(d0b, d0, kBytes, nrtMemcpyDeviceToDevice), nrtSuccess);
  ASSERT_EQ(nrtMemcpy(d1, d0b, kBytes, nrtMemcpyDeviceToDevice), nrtSuccess);  // peer
  ASSERT_EQ(nrtMemcpy(pinned, d1, kBytes, nrtMemcpyDeviceToHost), nrtSuccess);
  std::vector<unsigned char> back(kBytes);
  ASSERT_EQ(nrtMemcpy(back.data(), pinned, kBytes, nrtMemcpyHostToHost), nrtSuccess);
  EXPECT_EQ(back, host);
}

TEST_F(Copies, AsyncCopiesAreOrderedWithTasks) {
  nrtStream_t s = nrt_test::new_stream(0);
  auto* dev = static_cast<unsigned char*>(d0);
  neuronrt::launch(s, "fill", [dev] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::memset(dev, 7, kBytes);
  });
  ASSERT_EQ(nrtMemcpyAsync(pinned, d0, kBytes, nrtMemcpyDeviceToHost, s), nrtSuccess);
  ASSERT_EQ(nrtMemcpyAsync(d0, host.data(), kBytes, nrtMemcpyHostToDevice, s), nrtSuccess);
  std::atomic<int> first{-1};
  neuronrt::launch(s, "read", [dev, &first] { first = dev[0]; });
  ASSERT_EQ(nrtMemcpyAsync(d0b, d0, kBytes, nrtMemcpyDeviceToDevice, s), nrtSuccess);
  std::vector<unsigned char> out(kBytes);
  ASSERT_EQ(nrtMemcpyAsync(out.data(), out.data(), 0, nrtMemcpyHostToHost, s), nrtSuccess);
  neuronrt::synchronize(s);
  EXPECT_EQ(static_cast<unsigned char*>(pinned)[kBytes - 1], 7);
  EXPECT_EQ(first.load(), host[0]);
  EXPECT_EQ(std::memcmp(d0b, host.data(), kBytes), 0);
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}

TEST_F(Copies, SyncCopyWaitsForDefaultStreamWork) {
  nrtStream_t s = nrt_test::default_stream(0);
  auto* dev = static_cast<unsigned char*>(d0);
  neuronrt::launch(s, "late write", [dev] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    dev[5] = 99;
  });
  unsigned char value = 0;
  ASSERT_EQ(nrtMemcpy(&value, dev + 5, 1, nrtMemcpyDeviceToHost), nrtSuccess);
  EXPECT_EQ(value, 99);
}

TEST_F(Copies, SyncCopyFromWorkOnTheSameStream) {
  nrtStream_t s = nrt_test::default_stream(0);
  std::atomic<int> st{-1};
  const unsigned char* src = host.data();
  void* dst = d0;
  neuronrt::launch(s, "copy inside", [&st, src, dst] {
    st = nrtMemcpy(dst, src, kBytes, nrtMemcpyHostToDevice);
  });
  neuronrt::synchronize(s);
  EXPECT_EQ(st.load(), nrtSuccess);
  EXPECT_EQ(std::memcmp(d0, host.data(), kBytes), 0);
}

TEST_F(Copies, KindsAreValidated) {
  nrtStream_t s = nrt_test::default_stream(0);
  std::vector<unsigned char> other(kBytes);
  // DeviceToHost whose src is not device memory.
  EXPECT_EQ(nrtMemcpyAsync(other.data(), host.data(), 16, nrtMemcpyDeviceToHost, s),
            nrtErrorInvalidValue);
  EXPECT_NE(std::string(nrtGetLastErrorMessage()).find("not device memory"), std::string::npos)
      << nrtGetLastErrorMessage();
  EXPECT_EQ(nrtMemcpy(other.data(), pinned, 16, nrtMemcpyDeviceToHost), nrtErrorInvalidValue);
  // HostToDevice into host memory, and from device memory.
  EXPECT_EQ(nrtMemcpy(other.data(), host.data(), 16, nrtMemcpyHostToDevice), nrtErrorInvalidValue);
  EXPECT_EQ(nrtMemcpy(d0, d0b, 16, nrtMemcpyHostToDevice), nrtErrorInvalidValue);
  EXPECT_NE(std::string(nrtGetLastErrorMessage()).find("is device memory"), std::string::npos);
  EXPECT_EQ(nrtMemcpy(other.data(), d0, 16, nrtMemcpyHostToHost), nrtErrorInvalidValue);
  // Interior device pointers and pinned host sides are fine.
  EXPECT_EQ(nrtMemcpy(static_cast<char*>(d0) + 100, pinned, 16, nrtMemcpyHostToDevice),
            nrtSuccess);
  // Ranges must stay inside the allocation.
  EXPECT_EQ(nrtMemcpy(static_cast<char*>(d0) + 100, host.data(), kBytes, nrtMemcpyHostToDevice),
            nrtErrorInvalidValue);
  EXPECT_EQ(nrtMemcpy(d0, host.data(), 16, static_cast<nrtMemcpyKind>(9)), nrtErrorInvalidValue);
  EXPECT_EQ(nrtMemcpy(d0, nullptr, 16, nrtMemcpyHostToDevice), nrtErrorInvalidValue);
  EXPECT_EQ(nrtMemcpy(d0, nullptr, 0, nrtMemcpyHostToDevice), nrtSuccess);
  EXPECT_EQ(nrtMemcpyAsync(d0, host.data(), 16, nrtMemcpyHostToDevice, nullptr),
            nrtErrorInvalidHandle);
}

TEST_F(Copies, CopyQueuedBehindFailureIsSkipped) {
  nrtStream_t s = nrt_test::new_stream(0);
  std::memset(d0, 0, kBytes);
  Gate gate;
  neuronrt::launch(s, "hold", [&gate] { gate.wait(); });
  neuronrt::launch(s, "fails", [] { throw std::runtime_error("bad"); });
  ASSERT_EQ(nrtMemcpyAsync(d0, host.data(), kBytes, nrtMemcpyHostToDevice, s), nrtSuccess);
  gate.open();
  EXPECT_EQ(nrtStreamSynchronize(s), nrtErrorLaunchFailure);
  EXPECT_EQ(static_cast<unsigned char*>(d0)[0], 0);  // the copy did not run
  ASSERT_EQ(nrtMemcpyAsync(d0, host.data(), kBytes, nrtMemcpyHostToDevice, s), nrtSuccess);
  EXPECT_EQ(nrtStreamSynchronize(s), nrtSuccess);
  EXPECT_EQ(std::memcmp(d0, host.data(), kBytes), 0);
  EXPECT_EQ(nrtStreamDestroy(s), nrtSuccess);
}
