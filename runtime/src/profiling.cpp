// Profiling of queued work (see neuronrt.hpp, "Profiling"). Records go to
// one store under a mutex: only while profiling, once per finished task, and
// the two or so workers of a machine rarely meet there.
#include "profiling.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

namespace neuronrt::detail {

std::atomic<bool> g_profiling{false};
thread_local TaskProfile* t_running_task = nullptr;

namespace {

struct Store {
  std::mutex mu;
  uint64_t session = 0;  // guarded by mu; mirrored in g_session
  std::vector<TaskRecord> records;
};

Store& store() {
  static auto* s = new Store();  // leaked: workers may finish tasks during exit
  return *s;
}

std::atomic<uint64_t> g_session{0};
std::atomic<uint64_t> g_next_task{1};  // ids of profiled tasks

struct ThreadTags {
  uint64_t tag = 0;
  uint64_t user_tag = 0;
  int32_t tid = 0;
};
thread_local ThreadTags t_tags;

int32_t this_thread_id() {
  if (t_tags.tid == 0) t_tags.tid = static_cast<int32_t>(::syscall(SYS_gettid));
  return t_tags.tid;
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::unique_ptr<TaskProfile> begin_task_profile(int device, int64_t stream, const char* op_name) {
  auto p = std::make_unique<TaskProfile>();
  p->record.enqueue_begin_ns = now_ns();
  p->record.op_name = op_name ? op_name : "";
  p->record.device = device;
  p->record.stream = stream;
  p->record.tag = t_tags.tag;
  p->record.user_tag = t_tags.user_tag;
  p->record.host_thread = this_thread_id();
  p->record.task = g_next_task.fetch_add(1, std::memory_order_relaxed);
  p->session = g_session.load(std::memory_order_relaxed);
  return p;
}

void keep_task_profile(std::unique_ptr<TaskProfile> profile) {
  Store& s = store();
  std::lock_guard<std::mutex> lock(s.mu);
  if (profile->session == s.session) s.records.push_back(std::move(profile->record));
}

}  // namespace neuronrt::detail

namespace neuronrt {

void profiling_start() {
  detail::Store& s = detail::store();
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.session;
  s.records.clear();
  detail::g_session.store(s.session, std::memory_order_relaxed);
  detail::g_profiling.store(true, std::memory_order_relaxed);
}

void profiling_stop() { detail::g_profiling.store(false, std::memory_order_relaxed); }

bool profiling_enabled() { return detail::profiling_on(); }

void profiling_set_tags(uint64_t tag, uint64_t user_tag) {
  detail::t_tags.tag = tag;
  detail::t_tags.user_tag = user_tag;
}

void profiling_record_host_work(nrtStream_t stream, const char* op_name, int64_t start_ns) {
  if (!detail::profiling_on()) return;
  auto p = detail::begin_task_profile(nrtStreamGetDeviceIndex(stream), nrtStreamGetId(stream),
                                      op_name);
  p->record.end_ns = detail::now_ns();
  p->record.start_ns = p->record.enqueue_begin_ns = p->record.enqueue_end_ns = start_ns;
  p->record.on_host = true;
  detail::keep_task_profile(std::move(p));
}

bool profiling_in_task() { return detail::t_running_task != nullptr; }

void profiling_record_task_part(const char* name, int64_t start_ns, int64_t end_ns) {
  const detail::TaskProfile* task = detail::t_running_task;
  if (task == nullptr) return;
  auto p = std::make_unique<detail::TaskProfile>();
  p->record = task->record;
  p->record.op_name = name ? name : "";
  p->record.start_ns = start_ns;
  p->record.end_ns = end_ns;
  p->record.part = true;
  p->session = task->session;
  detail::keep_task_profile(std::move(p));
}

std::vector<TaskRecord> profiling_take_records() {
  detail::Store& s = detail::store();
  std::vector<TaskRecord> out;
  std::lock_guard<std::mutex> lock(s.mu);
  out.swap(s.records);
  // After the session, taking its records closes it: work that finishes
  // later is dropped instead of kept until the next session.
  if (!detail::profiling_on()) {
    ++s.session;
    detail::g_session.store(s.session, std::memory_order_relaxed);
  }
  return out;
}

size_t profiling_record_count() {
  detail::Store& s = detail::store();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.records.size();
}

int64_t profiling_now_ns() { return detail::now_ns(); }

}  // namespace neuronrt
