#include "csrc/runtime/NeuronStream.h"

#include <array>
#include <atomic>
#include <mutex>

#include <c10/util/Exception.h>

#include "csrc/runtime/NeuronException.h"
#include "csrc/runtime/NeuronFunctions.h"

namespace torchneuron {
namespace {

constexpr int kMaxDevices = 64;
constexpr int kPoolSize = 32;
constexpr int kMaxStreams = kPoolSize + 1;  // default stream + pool

struct DeviceStreams {
  std::array<std::atomic<nrtStream_t>, kMaxStreams> by_id{};
  std::atomic<uint32_t> next_pool{0};
  std::mutex create_mutex;
};

DeviceStreams& streams_of(c10::DeviceIndex device) {
  static std::array<DeviceStreams, kMaxDevices>* table = new std::array<DeviceStreams, kMaxDevices>();
  return (*table)[device];
}

// The pool stream at pool slot `slot` (stream id slot + 1), created on demand.
nrtStream_t pool_stream(c10::DeviceIndex device, int slot, int priority) {
  auto& ds = streams_of(device);
  nrtStream_t s = ds.by_id[slot + 1].load(std::memory_order_acquire);
  if (s) return s;
  std::lock_guard<std::mutex> lock(ds.create_mutex);
  s = ds.by_id[slot + 1].load(std::memory_order_acquire);
  if (!s) {
    NEURON_CHECK(nrtStreamCreate(&s, device, priority));
    ds.by_id[slot + 1].store(s, std::memory_order_release);
  }
  return s;
}

nrtStream_t default_handle(c10::DeviceIndex device) {
  auto& ds = streams_of(device);
  nrtStream_t s = ds.by_id[0].load(std::memory_order_acquire);
  if (C10_UNLIKELY(!s)) {
    NEURON_CHECK(nrtStreamGetDefault(&s, device));
    ds.by_id[0].store(s, std::memory_order_release);
  }
  return s;
}

thread_local std::array<c10::StreamId, kMaxDevices> tls_current{};

}  // namespace

nrtStream_t stream_handle(const c10::Stream& stream) {
  auto device = stream.device_index();
  check_device_index(device, "stream");
  auto id = stream.id();
  if (id == 0) return default_handle(device);
  TORCH_CHECK(id > 0 && id < kMaxStreams, "[neuron] invalid stream id ", id, " on neuron:",
              static_cast<int>(device));
  nrtStream_t s = streams_of(device).by_id[id].load(std::memory_order_acquire);
  return s ? s : pool_stream(device, static_cast<int>(id) - 1, 0);
}

c10::Stream current_stream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device, "current_stream");
  return c10::Stream(c10::Stream::UNSAFE, make_device(device), tls_current[device]);
}

nrtStream_t current_stream_handle(c10::DeviceIndex device) {
  auto id = tls_current[device];
  if (C10_LIKELY(id == 0)) return default_handle(device);
  return stream_handle(c10::Stream(c10::Stream::UNSAFE, make_device(device), id));
}

void set_current_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "[neuron] set_stream: expected a neuron stream, got one on ", stream.device());
  check_device_index(stream.device_index(), "set_stream");
  stream_handle(stream);  // validates the id
  tls_current[stream.device_index()] = stream.id();
}

c10::Stream default_stream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device, "default_stream");
  return c10::Stream(c10::Stream::UNSAFE, make_device(device), 0);
}

c10::Stream stream_from_pool(c10::DeviceIndex device, int priority) {
  if (device < 0) device = current_device();
  check_device_index(device, "Stream");
  int slot = static_cast<int>(streams_of(device).next_pool.fetch_add(1) % kPoolSize);
  pool_stream(device, slot, priority);
  return c10::Stream(c10::Stream::UNSAFE, make_device(device), slot + 1);
}

}  // namespace torchneuron
