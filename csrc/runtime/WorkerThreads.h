// How many threads an ATen CPU kernel gets on a device worker.
//
// ATen's CPU kernels on a stream worker run their parallel regions in the
// worker's OpenMP team, whose helper threads then spin for milliseconds
// (libgomp's wait before sleeping). In a decode step, small ops that cross
// ATen's grain size (casting a batch's logits, reducing over them) woke the
// team every step, and the spinning helper took the core the host thread
// needed to issue the next ops (a fifth of all samples in a profile of
// batch-8 bfloat16 decoding). So an op whose largest tensor has fewer than
// kTeamElements elements runs on the worker alone. Matrix products and
// convolutions, whose work grows faster than their operands, keep the team
// from kMatrixTeamElements (ATen's grain size) up; below it they are tiny (a
// rotary embedding's position product) and run alone too. What counts as an
// op's size depends on the op (OpPlan::work_size): a gather from a large
// table (an embedding lookup) is the size of its output, a scatter into a
// large tensor (a KV cache update) the size of its source.
//
// Tried and dropped: giving small ops the team while every host thread is
// blocked on the device (the helpers' spin then outlasts the wait and meets
// the next step's issuing: batch-8 bfloat16 decode 0.86 -> 0.62 kilotokens/s).
#pragma once

#include <cstdint>

namespace torchneuron {

constexpr int64_t kTeamElements = int64_t{1} << 20;
constexpr int64_t kMatrixTeamElements = int64_t{1} << 15;

// Scope on a worker thread around an ATen kernel whose largest tensor has
// `elements` elements (`matrix`: a matrix product or convolution): unless it
// is worth a team (above), the kernel runs on this thread only (its OpenMP
// thread count drops to 1 and comes back at the end of the scope).
class WorkerParallelism {
 public:
  WorkerParallelism(int64_t elements, bool matrix);
  ~WorkerParallelism();
  WorkerParallelism(const WorkerParallelism&) = delete;
  WorkerParallelism& operator=(const WorkerParallelism&) = delete;

 private:
  int restore_ = 0;
  bool team_ = false;
};

// Whether this worker's OpenMP team ran an ATen kernel within the last
// kTeamWarmMicros: its helpers are then still spinning, and our kernels
// borrow that team (at::parallel_for) rather than wake the runtime's compute
// threads, which would compete with the spinning helper for the core (a
// training step's attention after its matrix products ran 10% slower so).
bool worker_team_is_warm();
constexpr int64_t kTeamWarmMicros = 1000;

// Gives every stream worker ATen's intra-op settings before it runs work
// (workers run ATen CPU kernels). Called once when the extension loads.
void install_worker_init();

}  // namespace torchneuron
