// Runs the suite at the instruction-set level TORCHNEURON_ISA names (ctest
// runs it once per level). A level this CPU lacks is a skip with its reason
// (exit code 77, which ctest reports as skipped), not a failure.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "neuronkernels/isa.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string& why = neuronkernels::isa_error();
  if (!why.empty()) {
    const char* env = std::getenv("TORCHNEURON_ISA");
    const std::string want = env ? env : "";
    for (auto level : {neuronkernels::Isa::kAvx2, neuronkernels::Isa::kAvx512,
                       neuronkernels::Isa::kAvx512Bf16}) {
      if (want == neuronkernels::isa_name(level)) {
        std::printf("skipped: %s\n", why.c_str());
        return 77;
      }
    }
    std::fprintf(stderr, "%s\n", why.c_str());
    return 2;
  }
  // stderr: stdout is also the test listing that ctest's discovery reads.
  std::fprintf(stderr, "compiler primitives run at instruction-set level %s\n",
              neuronkernels::isa_name(neuronkernels::isa()));
  return RUN_ALL_TESTS();
}
