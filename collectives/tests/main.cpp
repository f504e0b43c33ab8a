// Test entry point. The environment fails the run if the suite leaves any
// neuroncoll segment in /dev/shm (crashed and killed ranks included).
#include <gtest/gtest.h>

#include <algorithm>

#include "harness.hpp"

namespace {

class ShmLeftoverCheck : public ::testing::Environment {
 public:
  void SetUp() override { before_ = nctest::shm_leftovers(); }
  void TearDown() override {
    std::vector<std::string> now = nctest::shm_leftovers();
    std::string left;
    for (const std::string& n : now) {
      if (std::find(before_.begin(), before_.end(), n) == before_.end()) left += " " + n;
    }
    EXPECT_TRUE(left.empty()) << "left in /dev/shm:" << left;
  }

 private:
  std::vector<std::string> before_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new ShmLeftoverCheck);
  return RUN_ALL_TESTS();
}
