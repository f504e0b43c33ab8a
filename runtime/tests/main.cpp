// Test entry point: pins the environment so results do not depend on the
// caller's NEURON_* variables.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  unsetenv("NEURON_RT_VISIBLE_CORES");
  unsetenv("NEURON_LAUNCH_BLOCKING");
  unsetenv("TORCHNEURON_KERNEL_THREADS");
  unsetenv("LOCAL_WORLD_SIZE");  // torchrun's, read by the device rule
  unsetenv("LOCAL_RANK");
  setenv("NEURON_RT_NUM_CORES", "2", 1);
  setenv("TORCHNEURON_DEVICE_MEMORY", "1GiB", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
