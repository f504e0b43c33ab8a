#include "csrc/runtime/WorkerThreads.h"

#include <omp.h>

#include <chrono>

#include <ATen/Parallel.h>

#include "neuronrt/neuronrt.hpp"

namespace torchneuron {
namespace {

using Clock = std::chrono::steady_clock;
thread_local Clock::time_point t_team_used{};  // when this worker's team last ran a kernel

void init_worker(int /*device*/) { at::init_num_threads(); }

}  // namespace

void install_worker_init() { neuronrt::set_worker_init(&init_worker); }

WorkerParallelism::WorkerParallelism(int64_t elements, bool matrix) {
  if (elements >= (matrix ? kMatrixTeamElements : kTeamElements)) {
    team_ = true;
    return;
  }
  const int threads = omp_get_max_threads();  // a thread-local setting: cheap
  if (threads > 1) {
    omp_set_num_threads(1);
    restore_ = threads;
  }
}

WorkerParallelism::~WorkerParallelism() {
  if (restore_ > 0) omp_set_num_threads(restore_);
  if (team_) t_team_used = Clock::now();
}

bool worker_team_is_warm() {
  return Clock::now() - t_team_used < std::chrono::microseconds(kTeamWarmMicros);
}

}  // namespace torchneuron
