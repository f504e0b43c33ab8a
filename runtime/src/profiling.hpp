// Profiling of queued work: the session flag checked on enqueue, the
// enqueuing thread's tags, and the store of finished tasks' records.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "neuronrt/neuronrt.hpp"

namespace neuronrt::detail {

// Allocated per task only while profiling, so a task costs one null
// pointer otherwise.
struct TaskProfile {
  TaskRecord record;
  uint64_t session = 0;
};

extern std::atomic<bool> g_profiling;

// The profiled task this worker runs (null otherwise), for its parts.
extern thread_local TaskProfile* t_running_task;

// The enqueue hot path: one relaxed load.
inline bool profiling_on() { return g_profiling.load(std::memory_order_relaxed); }

int64_t now_ns();

// A profile with the host-side fields filled (enqueue_end_ns is set by the
// caller when the task enters its queue).
std::unique_ptr<TaskProfile> begin_task_profile(int device, int64_t stream, const char* op_name);

// Keeps the record of a task that has run, if its session is still current.
void keep_task_profile(std::unique_ptr<TaskProfile> profile);

}  // namespace neuronrt::detail
