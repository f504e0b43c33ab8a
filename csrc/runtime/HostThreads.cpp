#include "csrc/runtime/HostThreads.h"

#include <omp.h>

#include <cstdlib>
#include <string>

#include <c10/util/Exception.h>

#include "neuronrt/neuronrt.hpp"

namespace torchneuron {
namespace {

// TORCHNEURON_HOST_THREADS: intra-op threads a host thread keeps once it uses
// neuron; 0 leaves host threads alone.
int host_threads_setting() {
  const char* v = std::getenv("TORCHNEURON_HOST_THREADS");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TORCH_CHECK(end != v && *end == '\0' && n >= 0 && n <= 4096,
              "TORCHNEURON_HOST_THREADS='", v,
              "': expected a thread count >= 0 (0 leaves host threads alone), e.g. 1");
  return static_cast<int>(n);
}

}  // namespace

void yield_host_threads_to_device() {
  thread_local bool done = false;
  if (done) [[likely]] return;
  done = true;
  if (neuronrt::on_worker_thread()) return;  // a device worker keeps its team
  static const int threads = host_threads_setting();
  if (threads == 0) return;
  if (omp_get_max_threads() > threads) omp_set_num_threads(threads);
  if (threads == 1) omp_pause_resource_all(omp_pause_soft);  // release this thread's idle team
}

}  // namespace torchneuron
