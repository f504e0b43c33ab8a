// The legacy profiler's device hooks (torch::profiler::impl::ProfilerStubs),
// used by torch.autograd.profiler.profile(use_device="neuron") without
// Kineto: each op is bracketed by two timing events on the current stream,
// and its device time is the time between them. torch.profiler uses the
// Kineto child profiler instead (ActivityProfiler.h).
#include <memory>

#include <c10/core/DeviceGuard.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include "csrc/runtime/BlockingWait.h"
#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"
#include "csrc/runtime/NeuronStream.h"
#include "neuronrt/neuronrt.h"

namespace torchneuron::profiler {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

nrtEvent_t event_of(const ProfilerVoidEventStub* stub) {
  return stub && *stub ? static_cast<nrtEvent_t>(stub->get()) : nullptr;
}

struct NeuronProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    const c10::DeviceIndex d = current_device();
    if (device) *device = d;
    nrtEvent_t e = nullptr;
    NEURON_CHECK(nrtEventCreate(&e, nrtEventDefault));
    *event = std::shared_ptr<void>(e, [](void* p) { nrtEventDestroy(static_cast<nrtEvent_t>(p)); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    NEURON_CHECK(nrtEventRecord(e, current_stream_handle(d)));
  }

  // Microseconds, as the CUDA stubs return.
  float elapsed(const ProfilerVoidEventStub* a, const ProfilerVoidEventStub* b) const override {
    nrtEvent_t start = event_of(a), end = event_of(b);
    if (!start || !end) return 0.0f;
    nrtStatus st = nrtSuccess;
    blocking_wait([&] {
      st = nrtEventSynchronize(start);
      if (st == nrtSuccess) st = nrtEventSynchronize(end);
    });
    NEURON_CHECK(st);
    float ms = 0.0f;
    NEURON_CHECK(nrtEventElapsedTime(&ms, start, end));
    return ms * 1000.0f;
  }

  // No annotation tool to forward ranges to.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  void onEachDevice(std::function<void(int)> op) const override {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, current_device()));
    for (c10::DeviceIndex d = 0; d < device_count(); ++d) {
      guard.set_index(d);
      op(d);
    }
  }

  void synchronize() const override {
    const int d = current_device();
    nrtStatus st = nrtSuccess;
    blocking_wait([&] { st = nrtDeviceSynchronize(d); });
    NEURON_CHECK(st);
  }

  bool enabled() const override { return true; }
};

struct RegisterStubs {
  RegisterStubs() {
    static NeuronProfilerStubs stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  }
} register_stubs;

}  // namespace
}  // namespace torchneuron::profiler
