#include "csrc/runtime/WorkerThreads.h"

#include <omp.h>

namespace torchneuron {

WorkerParallelism::WorkerParallelism(int64_t elements, bool always) {
  if (always || elements >= kTeamElements) return;
  const int threads = omp_get_max_threads();  // a thread-local setting: cheap
  if (threads > 1) {
    omp_set_num_threads(1);
    restore_ = threads;
  }
}

WorkerParallelism::~WorkerParallelism() {
  if (restore_ > 0) omp_set_num_threads(restore_);
}

}  // namespace torchneuron
