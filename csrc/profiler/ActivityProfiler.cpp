#include "csrc/profiler/ActivityProfiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <tuple>
#include <unordered_map>

#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include "neuronrt/neuronrt.hpp"

namespace torchneuron::profiler {
namespace {

using libkineto::ActivityType;

// The correlation ids of the ops and record_function ranges this thread is
// inside; the innermost ones tag the work it queues.
struct OpenIds {
  std::vector<uint64_t> ops, ranges;
  void publish() const {
    neuronrt::profiling_set_tags(ops.empty() ? 0 : ops.back(),
                                 ranges.empty() ? 0 : ranges.back());
  }
};
thread_local OpenIds t_open;

// Flow ids join a launch to its device interval; unique per process.
std::atomic<uint32_t> g_next_flow{1};

// The offset from the runtime's steady clock to Unix time, which the trace's
// host events use. One read of each clock could be split by a preemption
// (under load, milliseconds), shifting every device interval against the ops
// that launched it: the Unix read is taken between two steady reads, the
// closest of a few tries kept, and its midpoint used.
int64_t unix_ns_minus_steady_ns() {
  int64_t best_gap = INT64_MAX, offset = 0;
  for (int i = 0; i < 8; ++i) {
    const int64_t before = neuronrt::profiling_now_ns();
    const int64_t unix_now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
    const int64_t after = neuronrt::profiling_now_ns();
    if (after - before < best_gap) {
      best_gap = after - before;
      offset = unix_now - (before + (after - before) / 2);
    }
  }
  return offset;
}

const std::set<ActivityType> kActivities{ActivityType::CONCURRENT_KERNEL,
                                         ActivityType::PRIVATEUSE1_RUNTIME,
                                         ActivityType::GPU_USER_ANNOTATION};

}  // namespace

const std::string& NeuronActivityProfiler::name() const {
  static const std::string kName = "neuron";
  return kName;
}

const std::set<ActivityType>& NeuronActivityProfiler::availableActivities() const {
  return kActivities;
}

std::unique_ptr<libkineto::IActivityProfilerSession> NeuronActivityProfiler::configure(
    const std::set<ActivityType>& activity_types, const libkineto::Config& /*config*/) {
  // Device activities were asked for (ProfilerActivity.PrivateUse1); a
  // CPU-only session later in the process gets no child session at all.
  if (!activity_types.count(ActivityType::CONCURRENT_KERNEL)) return nullptr;
  return std::make_unique<NeuronActivitySession>(activity_types);
}

std::unique_ptr<libkineto::IActivityProfilerSession> NeuronActivityProfiler::configure(
    int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& activity_types,
    const libkineto::Config& config) {
  return configure(activity_types, config);
}

NeuronActivitySession::NeuronActivitySession(std::set<ActivityType> types)
    : types_(std::move(types)), buffer_(std::make_unique<libkineto::CpuTraceBuffer>()) {
  buffer_->span = libkineto::TraceSpan(0, 0, "neuron");
  buffer_->gpuOpCount = -1;
}

NeuronActivitySession::~NeuronActivitySession() {
  // A session dropped without stop() (an aborted trace) must not leave the
  // runtime timestamping.
  if (status_ == libkineto::TraceStatus::RECORDING) neuronrt::profiling_stop();
}

void NeuronActivitySession::start() {
  clock_offset_ns_ = unix_ns_minus_steady_ns();
  neuronrt::profiling_start();
  status_ = libkineto::TraceStatus::RECORDING;
}

void NeuronActivitySession::stop() {
  neuronrt::profiling_stop();
  status_ = libkineto::TraceStatus::PROCESSING;
}

void NeuronActivitySession::pushCorrelationId(uint64_t id) {
  t_open.ops.push_back(id);
  t_open.publish();
}

void NeuronActivitySession::popCorrelationId() {
  if (!t_open.ops.empty()) t_open.ops.pop_back();
  t_open.publish();
}

void NeuronActivitySession::pushUserCorrelationId(uint64_t id) {
  t_open.ranges.push_back(id);
  t_open.publish();
}

void NeuronActivitySession::popUserCorrelationId() {
  if (!t_open.ranges.empty()) t_open.ranges.pop_back();
  t_open.publish();
}

libkineto::GenericTraceActivity& NeuronActivitySession::add(ActivityType type,
                                                            const std::string& name) {
  buffer_->emplace_activity(buffer_->span, type, name);
  return libkineto::CpuTraceBuffer::toRef(buffer_->activities.back());
}

void NeuronActivitySession::processTrace(libkineto::ActivityLogger& logger) {
  processTrace(logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
}

void NeuronActivitySession::processTrace(libkineto::ActivityLogger& logger,
                                         libkineto::getLinkedActivityCallback linked_activity,
                                         int64_t start_time, int64_t end_time) {
  buffer_->span.startTime = start_time;
  buffer_->span.endTime = end_time;
  const std::vector<neuronrt::TaskRecord> records = neuronrt::profiling_take_records();
  auto unix_ns = [this](int64_t steady_ns) { return steady_ns + clock_offset_ns_; };
  auto op_of = [&](uint64_t id) -> const libkineto::ITraceActivity* {
    // Torch keeps its correlation ids as Kineto's 32-bit activity ids.
    return id ? linked_activity(static_cast<int32_t>(id)) : nullptr;
  };
  auto next_flow = [] { return g_next_flow.fetch_add(1, std::memory_order_relaxed); };
  // Work on the device, as Kineto's kernels: linked to the op that queued it.
  auto device_work = [&](const neuronrt::TaskRecord& r, int32_t id) -> libkineto::GenericTraceActivity& {
    auto& work = add(ActivityType::CONCURRENT_KERNEL, r.op_name);
    work.device = r.device;
    work.resource = static_cast<int32_t>(r.stream);
    work.startTime = unix_ns(r.start_ns);
    work.endTime = unix_ns(r.end_ns);
    work.id = id;
    work.linked = op_of(r.tag);
    work.addMetadata("device", r.device);
    work.addMetadata("stream", r.stream);
    return work;
  };
  auto flow_end = [](libkineto::GenericTraceActivity& a, uint32_t flow) {
    a.flow.id = flow;
    a.flow.type = libkineto::kLinkAsyncCpuGpu;
    a.flow.start = 0;
  };
  const int32_t pid = libkineto::processId();
  // record_function range id, device, stream -> [first start, last end]
  std::map<std::tuple<uint64_t, int, int64_t>, std::pair<int64_t, int64_t>> ranges;
  // Tasks that recorded parts (a compiled program's steps, kept before their
  // task) -> the flow from the task's launch to its first part. As a CUDA
  // graph's kernels are, the parts are the device's work and the task is a
  // range around them, so its time is not counted twice.
  std::unordered_map<uint64_t, uint32_t> part_flows;

  for (const neuronrt::TaskRecord& r : records) {
    if (r.part) {
      auto& step = device_work(r, static_cast<int32_t>(next_flow()));
      auto [it, first] = part_flows.try_emplace(r.task, 0);
      if (first) flow_end(step, it->second = next_flow());
      logger.handleActivity(step);
      continue;
    }
    const auto parts = part_flows.find(r.task);
    const bool has_parts = parts != part_flows.end();
    const uint32_t flow = has_parts ? parts->second : next_flow();
    // Work of the synchronous path ran on the issuing thread: nothing queued.
    const bool queued = !r.on_host;
    if (queued && wants(ActivityType::PRIVATEUSE1_RUNTIME)) {
      // The host side: queueing the work, on the thread that issued it.
      auto& launch = add(ActivityType::PRIVATEUSE1_RUNTIME, "neuronrt::launch");
      launch.device = pid;
      launch.resource = r.host_thread;
      launch.threadId = r.host_thread;
      launch.startTime = unix_ns(r.enqueue_begin_ns);
      launch.endTime = unix_ns(r.enqueue_end_ns);
      launch.id = static_cast<int32_t>(flow);
      launch.linked = op_of(r.tag);
      launch.flow.id = flow;
      launch.flow.type = libkineto::kLinkAsyncCpuGpu;
      launch.flow.start = 1;
      launch.addMetadataQuoted("op", r.op_name);
      logger.handleActivity(launch);
    }
    streams_.emplace(r.device, r.stream);
    if (has_parts) {
      // The task around its parts, as a range on its stream.
      if (wants(ActivityType::GPU_USER_ANNOTATION)) {
        auto& task = add(ActivityType::GPU_USER_ANNOTATION, r.op_name);
        task.device = r.device;
        task.resource = static_cast<int32_t>(r.stream);
        task.startTime = unix_ns(r.start_ns);
        task.endTime = unix_ns(r.end_ns);
        task.id = static_cast<int32_t>(flow);
        task.addMetadata("queued us", (r.start_ns - r.enqueue_end_ns) / 1000);
        logger.handleActivity(task);
      }
    } else {
      // The device side: the work on its stream's worker.
      auto& work = device_work(r, static_cast<int32_t>(flow));
      work.addMetadata("correlation", flow);
      if (queued) {
        flow_end(work, flow);
        // How long it waited behind earlier work: the host was that far ahead.
        work.addMetadata("queued us", (r.start_ns - r.enqueue_end_ns) / 1000);
      } else {
        work.addMetadata("synchronous", 1);
      }
      logger.handleActivity(work);
    }
    if (r.user_tag && wants(ActivityType::GPU_USER_ANNOTATION)) {
      auto [it, fresh] = ranges.try_emplace({r.user_tag, r.device, r.stream}, r.start_ns, r.end_ns);
      if (!fresh) {
        it->second.first = std::min(it->second.first, r.start_ns);
        it->second.second = std::max(it->second.second, r.end_ns);
      }
    }
  }

  for (const auto& [key, span] : ranges) {
    const auto& [range_id, device, stream] = key;
    const libkineto::ITraceActivity* range = op_of(range_id);
    if (!range) continue;
    // As CUDA's: the range's id, not a link (its ops' work is linked already).
    auto& a = add(ActivityType::GPU_USER_ANNOTATION, range->name());
    a.device = device;
    a.resource = static_cast<int32_t>(stream);
    a.startTime = unix_ns(span.first);
    a.endTime = unix_ns(span.second);
    a.id = static_cast<int32_t>(range_id);
    logger.handleActivity(a);
  }
}

std::unique_ptr<libkineto::DeviceInfo> NeuronActivitySession::getDeviceInfo() {
  // Kineto takes one device per child session: name the first one used
  // (the others' tracks keep their stream names).
  const int device = streams_.empty() ? 0 : streams_.begin()->first;
  return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{
      device, device + (1 << 20), "neuron", "neuron:" + std::to_string(device)});
}

std::vector<libkineto::ResourceInfo> NeuronActivitySession::getResourceInfos() {
  std::vector<libkineto::ResourceInfo> out;
  for (const auto& [device, stream] : streams_) {
    out.push_back(libkineto::ResourceInfo{stream, stream, device, "stream " + std::to_string(stream)});
  }
  return out;
}

std::unique_ptr<libkineto::CpuTraceBuffer> NeuronActivitySession::getTraceBuffer() {
  return std::move(buffer_);
}

REGISTER_PRIVATEUSE1_PROFILER(NeuronActivityProfiler);

}  // namespace torchneuron::profiler
