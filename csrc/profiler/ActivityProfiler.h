// torch.profiler on neuron: a Kineto child profiler (PyTorch's
// PrivateUse1ProfilerRegistry) that turns the runtime's per-task records
// (neuronrt::profiling_*) into device activities. Each queued op appears
// twice, as on CUDA: the host-side launch on the calling thread and the
// device-side interval on its stream's track, both linked to the ATen op
// that queued them (its correlation id) and joined by a flow arrow.
// record_function ranges also get a span on each stream their ops ran on.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <IActivityProfiler.h>
#include <libkineto.h>

namespace torchneuron::profiler {

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override;
  const std::set<libkineto::ActivityType>& availableActivities() const override;
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override;
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t ts_ms, int64_t duration_ms, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override;
};

class NeuronActivitySession final : public libkineto::IActivityProfilerSession {
 public:
  explicit NeuronActivitySession(std::set<libkineto::ActivityType> types);
  ~NeuronActivitySession() override;

  void start() override;
  void stop() override;
  std::vector<std::string> errors() override { return {}; }
  void processTrace(libkineto::ActivityLogger& logger) override;
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t start_time,
                    int64_t end_time) override;
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override;
  std::vector<libkineto::ResourceInfo> getResourceInfos() override;
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override;

  // Called on the thread dispatching an op (ids of ATen ops) or entering a
  // record_function range (user ids): the work it queues carries the
  // innermost ones.
  void pushCorrelationId(uint64_t id) override;
  void popCorrelationId() override;
  void pushUserCorrelationId(uint64_t id) override;
  void popUserCorrelationId() override;

 private:
  libkineto::GenericTraceActivity& add(libkineto::ActivityType type, const std::string& name);
  bool wants(libkineto::ActivityType type) const { return types_.count(type) != 0; }

  std::set<libkineto::ActivityType> types_;
  // The runtime's steady clock to Kineto's (nanoseconds since the Unix epoch).
  int64_t clock_offset_ns_ = 0;
  // Owned through a pointer: activities point at its span, so it must not move.
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
  std::set<std::pair<int, int64_t>> streams_;  // (device, stream) seen
};

}  // namespace torchneuron::profiler
