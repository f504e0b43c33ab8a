// Environment parsing: topology, capacity, and invalid values.
#include <cstring>

#include "config.hpp"
#include "support.hpp"

using neuronrt::detail::capped_capacity;
using neuronrt::detail::make_config;
using neuronrt::detail::parse_core_count;
using neuronrt::detail::parse_memory_size;
using neuronrt::detail::parse_visible_cores;
using nrt_test::ScopedEnv;

namespace {

constexpr size_t MiB = size_t{1} << 20;
constexpr size_t GiB = size_t{1} << 30;

std::vector<int> cores(const std::string& text) {
  std::vector<int> out;
  std::string why;
  EXPECT_TRUE(parse_visible_cores(text, &out, &why)) << text << ": " << why;
  return out;
}

bool cores_rejected(const std::string& text) {
  std::vector<int> out;
  std::string why;
  const bool ok = parse_visible_cores(text, &out, &why);
  return !ok && !why.empty();
}

size_t mem(const std::string& text) {
  size_t bytes = 0;
  EXPECT_TRUE(parse_memory_size(text, &bytes)) << text;
  return bytes;
}

bool mem_rejected(const std::string& text) {
  size_t bytes = 0;
  return !parse_memory_size(text, &bytes);
}

}  // namespace

TEST(Config, VisibleCoresForms) {
  EXPECT_EQ(cores("0-3"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cores("0,2"), (std::vector<int>{0, 2}));
  EXPECT_EQ(cores("1"), (std::vector<int>{1}));
  EXPECT_EQ(cores(" 4 , 0-1 "), (std::vector<int>{4, 0, 1}));
  EXPECT_EQ(cores("5-5"), (std::vector<int>{5}));
}

TEST(Config, VisibleCoresRejected) {
  for (const char* bad : {"", "a", "3-1", "0,,1", "0,", "0,0", "0-2,1", "-1", "1-", "1.5",
                          "0-300"}) {
    EXPECT_TRUE(cores_rejected(bad)) << "'" << bad << "'";
  }
}

TEST(Config, CoreCount) {
  int n = 0;
  EXPECT_TRUE(parse_core_count("4", &n));
  EXPECT_EQ(n, 4);
  EXPECT_TRUE(parse_core_count(" 1 ", &n));
  EXPECT_EQ(n, 1);
  for (const char* bad : {"0", "-1", "x", "2x", "257", ""}) {
    EXPECT_FALSE(parse_core_count(bad, &n)) << bad;
  }
}

TEST(Config, MemorySizes) {
  EXPECT_EQ(mem("512MiB"), 512 * MiB);
  EXPECT_EQ(mem("2GiB"), 2 * GiB);
  EXPECT_EQ(mem("1048576"), size_t{1048576});
  EXPECT_EQ(mem("2gib"), 2 * GiB);
  EXPECT_EQ(mem("2 GB"), 2 * GiB);   // KB/MB/GB are powers of 1024 too
  EXPECT_EQ(mem("64kb"), 64 * size_t{1024});
  EXPECT_EQ(mem("64KiB"), 64 * size_t{1024});
  EXPECT_EQ(mem("100B"), size_t{100});
  EXPECT_EQ(mem("1.5GiB"), GiB + GiB / 2);
  EXPECT_EQ(mem("3M"), 3 * MiB);
  for (const char* bad : {"", "abc", "0", "0MiB", "12XB", "-5", "1..5G", "GiB", "5 GiBs"}) {
    EXPECT_TRUE(mem_rejected(bad)) << "'" << bad << "'";
  }
}

TEST(Config, HostMemoryCap) {
  // 90% of 16 GiB over 2 cores, rounded down to 2 MiB.
  const size_t expected = (16 * GiB / 10 * 9 / 2) / (2 * MiB) * (2 * MiB);
  const size_t cap = capped_capacity(24 * GiB, 16 * GiB, 2);
  EXPECT_LE(cap, 16 * GiB * 9 / 10 / 2);
  EXPECT_EQ(cap % (2 * MiB), 0u);
  EXPECT_NEAR(static_cast<double>(cap), static_cast<double>(expected), 2.0 * MiB);
  EXPECT_EQ(capped_capacity(1 * GiB, 64 * GiB, 2), 1 * GiB);   // fits: not capped
  EXPECT_EQ(capped_capacity(24 * GiB, 0, 2), 24 * GiB);        // unknown: no cap
}

TEST(Config, Precedence) {
  auto c = make_config("0,2", "8", nullptr, nullptr, 0);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.physical_cores, (std::vector<int>{0, 2}));  // VISIBLE_CORES wins
  c = make_config(nullptr, "3", nullptr, nullptr, 0);
  EXPECT_EQ(c.core_count(), 3);
  c = make_config(nullptr, nullptr, nullptr, nullptr, 0);
  EXPECT_EQ(c.core_count(), 2);
  EXPECT_EQ(c.requested_memory, 24 * GiB);
  EXPECT_EQ(c.capacity, 24 * GiB);
  EXPECT_FALSE(c.capped);
  EXPECT_FALSE(c.launch_blocking);
  c = make_config(nullptr, nullptr, "1TiB", "1", 8 * GiB);
  EXPECT_TRUE(c.capped);
  EXPECT_EQ(c.requested_memory, 1024 * GiB);
  EXPECT_LT(c.capacity, 8 * GiB);
  EXPECT_TRUE(c.launch_blocking);
}

TEST(Config, TorchrunLocalRanks) {
  // Three local processes: three cores each, threads start on LOCAL_RANK,
  // and the host cap is shared by 3 x 3 cores.
  auto c = make_config(nullptr, nullptr, nullptr, nullptr, 18 * GiB, nullptr, "3", "2");
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.core_count(), 3);
  EXPECT_EQ(c.local_processes, 3);
  EXPECT_EQ(c.default_device, 2);
  EXPECT_EQ(c.capacity, capped_capacity(24 * GiB, 18 * GiB, 9));
  c = make_config(nullptr, nullptr, nullptr, nullptr, 0, nullptr, "2", "0");
  EXPECT_EQ(c.core_count(), 2);
  EXPECT_EQ(c.default_device, 0);
  // Explicit cores win; a LOCAL_RANK beyond them leaves threads on core 0.
  c = make_config("5", nullptr, nullptr, nullptr, 0, nullptr, "4", "3");
  EXPECT_EQ(c.core_count(), 1);
  EXPECT_EQ(c.default_device, 0);
  // Not torchrun's numbers: ignored.
  c = make_config(nullptr, nullptr, nullptr, nullptr, 0, nullptr, "many", "x");
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.core_count(), 2);
  EXPECT_EQ(c.local_processes, 1);
  EXPECT_EQ(c.default_device, 0);
}

TEST(Config, ErrorMessagesNameVariableValueAndForms) {
  auto c = make_config("zero-three", nullptr, nullptr, nullptr, 0);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find("NEURON_RT_VISIBLE_CORES='zero-three'"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("'0-3'"), std::string::npos) << c.error;
  c = make_config(nullptr, "0", nullptr, nullptr, 0);
  EXPECT_NE(c.error.find("NEURON_RT_NUM_CORES='0'"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("1 to 256"), std::string::npos) << c.error;
  c = make_config(nullptr, nullptr, "lots", nullptr, 0);
  EXPECT_NE(c.error.find("TORCHNEURON_DEVICE_MEMORY='lots'"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("512MiB"), std::string::npos) << c.error;
  c = make_config(nullptr, nullptr, nullptr, nullptr, 0, "two");
  EXPECT_NE(c.error.find("TORCHNEURON_KERNEL_THREADS='two'"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("1 to 256"), std::string::npos) << c.error;
}

TEST(Config, KernelThreads) {
  auto c = make_config(nullptr, nullptr, nullptr, nullptr, 0);
  EXPECT_EQ(c.kernel_threads, 0);  // one per usable CPU
  c = make_config(nullptr, nullptr, nullptr, nullptr, 0, " 3 ");
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(c.kernel_threads, 3);
  EXPECT_FALSE(make_config(nullptr, nullptr, nullptr, nullptr, 0, "0").ok);
}

TEST(ConfigEnv, VisibleCoresRange) {
  ScopedEnv env{{"NEURON_RT_VISIBLE_CORES", "0-3"}};
  int n = 0;
  ASSERT_EQ(nrtGetDeviceCount(&n), nrtSuccess);
  EXPECT_EQ(n, 4);
  nrtDeviceProp prop;
  ASSERT_EQ(nrtGetDeviceProperties(&prop, 3), nrtSuccess);
  EXPECT_EQ(prop.physicalIndex, 3);
  EXPECT_EQ(prop.coreCount, 4);
}

TEST(ConfigEnv, VisibleCoresListWinsOverNumCores) {
  ScopedEnv env{{"NEURON_RT_VISIBLE_CORES", "0,2"}, {"NEURON_RT_NUM_CORES", "8"}};
  int n = 0;
  ASSERT_EQ(nrtGetDeviceCount(&n), nrtSuccess);
  EXPECT_EQ(n, 2);
  nrtDeviceProp prop;
  ASSERT_EQ(nrtGetDeviceProperties(&prop, 1), nrtSuccess);
  EXPECT_EQ(prop.physicalIndex, 2);
  EXPECT_EQ(nrtGetDeviceProperties(&prop, 2), nrtErrorInvalidDevice);
}

TEST(ConfigEnv, NumCores) {
  ScopedEnv env{{"NEURON_RT_NUM_CORES", "3"}};
  int n = 0;
  ASSERT_EQ(nrtGetDeviceCount(&n), nrtSuccess);
  EXPECT_EQ(n, 3);
}

TEST(ConfigEnv, DefaultIsTwoCores) {
  ScopedEnv env{{"NEURON_RT_NUM_CORES", nullptr}};
  int n = 0;
  ASSERT_EQ(nrtGetDeviceCount(&n), nrtSuccess);
  EXPECT_EQ(n, 2);
}

TEST(ConfigEnv, InvalidValueReportsConfigurationError) {
  ScopedEnv env{{"NEURON_RT_NUM_CORES", "two"}};
  int n = 7;
  EXPECT_EQ(nrtGetDeviceCount(&n), nrtErrorInvalidConfiguration);
  EXPECT_EQ(n, 0);
  const std::string message = nrtGetLastErrorMessage();
  EXPECT_NE(message.find("NEURON_RT_NUM_CORES='two'"), std::string::npos) << message;
  void* p = nullptr;
  EXPECT_EQ(nrtMalloc(&p, 64, 0), nrtErrorInvalidConfiguration);
  nrtStream_t s = nullptr;
  EXPECT_EQ(nrtStreamGetDefault(&s, 0), nrtErrorInvalidConfiguration);
  try {
    neuronrt::CachingAllocator::get().allocate(64, 0, nullptr);
    FAIL() << "expected an exception";
  } catch (const neuronrt::Error& e) {
    EXPECT_EQ(e.status(), nrtErrorInvalidConfiguration);
    EXPECT_NE(std::string(e.what()).find("NEURON_RT_NUM_CORES"), std::string::npos);
  }
}

TEST(ConfigEnv, InvalidVisibleCores) {
  ScopedEnv env{{"NEURON_RT_VISIBLE_CORES", "1-0"}};
  int n = 0;
  EXPECT_EQ(nrtGetDeviceCount(&n), nrtErrorInvalidConfiguration);
  EXPECT_NE(std::string(nrtGetLastErrorMessage()).find("NEURON_RT_VISIBLE_CORES='1-0'"),
            std::string::npos);
}

TEST(ConfigEnv, InvalidDeviceMemory) {
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "12 parsecs"}};
  nrtDeviceProp prop;
  EXPECT_EQ(nrtGetDeviceProperties(&prop, 0), nrtErrorInvalidConfiguration);
  EXPECT_NE(std::string(nrtGetLastErrorMessage()).find("TORCHNEURON_DEVICE_MEMORY='12 parsecs'"),
            std::string::npos);
}

TEST(ConfigEnv, DeviceMemory) {
  if (neuronrt::detail::read_mem_available() < 2 * GiB) GTEST_SKIP() << "host too small";
  for (auto [text, bytes] : {std::pair{"512MiB", 512 * MiB}, std::pair{"1048576", MiB}}) {
    ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", text}};
    nrtDeviceProp prop;
    ASSERT_EQ(nrtGetDeviceProperties(&prop, 0), nrtSuccess);
    EXPECT_STREQ(prop.name, "NeuronCore-v3 (software)");
    EXPECT_EQ(prop.totalMemory, bytes);
    EXPECT_EQ(prop.requestedMemory, bytes);
    EXPECT_EQ(prop.memoryCapped, 0);
    size_t free_bytes = 0, total = 0;
    ASSERT_EQ(nrtMemGetInfo(0, &free_bytes, &total), nrtSuccess);
    EXPECT_EQ(total, bytes);
  }
}

TEST(ConfigEnv, HugeRequestIsCappedToHostMemory) {
  if (neuronrt::detail::read_mem_available() == 0) GTEST_SKIP() << "no /proc/meminfo";
  ScopedEnv env{{"TORCHNEURON_DEVICE_MEMORY", "1024TiB"}};
  nrtDeviceProp prop;
  ASSERT_EQ(nrtGetDeviceProperties(&prop, 0), nrtSuccess);
  EXPECT_EQ(prop.memoryCapped, 1);
  EXPECT_EQ(prop.requestedMemory, 1024 * 1024 * GiB);
  EXPECT_LT(prop.totalMemory, prop.requestedMemory);
  EXPECT_EQ(prop.totalMemory % (2 * MiB), 0u);
}

TEST(ConfigEnv, LaunchBlockingFlag) {
  EXPECT_FALSE(neuronrt::launch_blocking());
  ScopedEnv env{{"NEURON_LAUNCH_BLOCKING", "1"}};
  EXPECT_TRUE(neuronrt::launch_blocking());
}
