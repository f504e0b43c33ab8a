// FileStore: values, counters, bounded waits; the host identity.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "neuroncoll/group.hpp"

namespace {

using namespace neuroncoll;
using namespace std::chrono_literals;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/neuroncoll-store-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ASSERT_TRUE(make_file_store(dir_, &store_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::shared_ptr<Store> store_;
};

TEST_F(FileStoreTest, SetGetBytesAndSlashes) {
  const std::string value("a\0b/c", 5);
  ASSERT_TRUE(store_->set("group/x/1", value).ok());
  std::string got;
  ASSERT_TRUE(store_->get("group/x/1", 100ms, &got).ok());
  EXPECT_EQ(got, value);
  ASSERT_TRUE(store_->set("group/x/1", "new").ok());
  ASSERT_TRUE(store_->get("group/x/1", 100ms, &got).ok());
  EXPECT_EQ(got, "new");
}

TEST_F(FileStoreTest, GetTimesOutNamingTheKey) {
  std::string got;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = store_->get("missing/key", 50ms, &got);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("missing/key"), std::string::npos) << s.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

TEST_F(FileStoreTest, AddIsAtomicAcrossThreads) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        int64_t v = 0;
        ASSERT_TRUE(store_->add("counter", 1, &v).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  int64_t v = 0;
  ASSERT_TRUE(store_->add("counter", 0, &v).ok());
  EXPECT_EQ(v, 200);
}

TEST_F(FileStoreTest, WaitSeesLateKey) {
  std::thread writer([&] {
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(store_->set("late", "1").ok());
  });
  const std::string keys[] = {"late"};
  EXPECT_TRUE(store_->wait(keys, 5s).ok());
  writer.join();
}

TEST(HostId, CarriesBootIdAndNetworkNamespace) {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  const std::string id = local_host_id();
  EXPECT_NE(id.find(boot_id), std::string::npos) << id;
  EXPECT_NE(id.find("/net:"), std::string::npos) << id;
  EXPECT_EQ(id, local_host_id());
}

}  // namespace
