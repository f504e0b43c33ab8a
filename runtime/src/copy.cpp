// Copies. Device memory is host memory, so a copy is a memmove; what matters
// is ordering (copies run on streams like any other work) and catching a
// wrong kind or range early with a clear message, as a real DMA engine would.
#include <cstring>

#include "device.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "stream.hpp"

namespace neuronrt::detail {
namespace {

const char* kind_name(nrtMemcpyKind kind) {
  switch (kind) {
    case nrtMemcpyHostToHost: return "HostToHost";
    case nrtMemcpyHostToDevice: return "HostToDevice";
    case nrtMemcpyDeviceToHost: return "DeviceToHost";
    case nrtMemcpyDeviceToDevice: return "DeviceToDevice";
  }
  return "?";
}

const char* op_name(nrtMemcpyKind kind) {
  switch (kind) {
    case nrtMemcpyHostToHost: return "memcpy HostToHost";
    case nrtMemcpyHostToDevice: return "memcpy HostToDevice";
    case nrtMemcpyDeviceToHost: return "memcpy DeviceToHost";
    case nrtMemcpyDeviceToDevice: return "memcpy DeviceToDevice";
  }
  return "memcpy";
}

// Checks one side of a copy. Device sides must lie inside one device
// allocation; host sides may be pinned or ordinary host memory, but not
// device memory. Sets *device to the device of a device side.
nrtStatus check_side(const char* api, nrtMemcpyKind kind, const char* side,
                     const void* p, size_t count, bool want_device, int* device) {
  if (p == nullptr) {
    return set_errorf(nrtErrorInvalidValue, "%s(%s): %s is null", api, kind_name(kind), side);
  }
  Region r;
  const bool known = find_region(p, &r);
  const bool is_device = known && r.device != kPinnedHost;
  if (want_device && !is_device) {
    return set_errorf(nrtErrorInvalidValue,
                      "%s(%s): %s %p is not device memory (allocate it with nrtMalloc or "
                      "the caching allocator, or use another copy kind)",
                      api, kind_name(kind), side, p);
  }
  if (!want_device && is_device) {
    return set_errorf(nrtErrorInvalidValue,
                      "%s(%s): %s %p is device memory of neuron:%d; use a copy kind with "
                      "a device %s",
                      api, kind_name(kind), side, p, r.device, side);
  }
  if (known) {
    const uintptr_t offset = reinterpret_cast<uintptr_t>(p) - r.start;
    if (count > r.size - offset) {
      return set_errorf(nrtErrorInvalidValue,
                        "%s(%s): %s range [%p, +%zu) runs past the end of its %zu-byte "
                        "allocation",
                        api, kind_name(kind), side, p, count, r.size);
    }
  }
  *device = is_device ? r.device : -1;
  return nrtSuccess;
}

struct CopyPlan {
  int src_device = -1;
  int dst_device = -1;
};

nrtStatus check_copy(const char* api, void* dst, const void* src, size_t count,
                     nrtMemcpyKind kind, CopyPlan* plan) {
  if (kind < nrtMemcpyHostToHost || kind > nrtMemcpyDeviceToDevice) {
    return set_errorf(nrtErrorInvalidValue, "%s: unknown nrtMemcpyKind %d", api,
                      static_cast<int>(kind));
  }
  if (count == 0) return nrtSuccess;
  const bool src_device = kind == nrtMemcpyDeviceToHost || kind == nrtMemcpyDeviceToDevice;
  const bool dst_device = kind == nrtMemcpyHostToDevice || kind == nrtMemcpyDeviceToDevice;
  if (nrtStatus st = check_side(api, kind, "src", src, count, src_device, &plan->src_device);
      st != nrtSuccess) {
    return st;
  }
  return check_side(api, kind, "dst", dst, count, dst_device, &plan->dst_device);
}

Task copy_task(void* dst, const void* src, size_t count, nrtMemcpyKind kind) {
  Task t;
  t.kind = Task::Kind::kMemcpy;
  t.op_name = op_name(kind);
  t.a = dst;
  t.b = src;
  t.n = count;
  return t;
}

}  // namespace
}  // namespace neuronrt::detail

using namespace neuronrt::detail;

extern "C" {

nrtStatus nrtMemcpyAsync(void* dst, const void* src, size_t count,
                         nrtMemcpyKind kind, nrtStream_t stream) {
  if (nrtStatus st = check_stream(stream); st != nrtSuccess) return st;
  CopyPlan plan;
  if (nrtStatus st = check_copy("nrtMemcpyAsync", dst, src, count, kind, &plan);
      st != nrtSuccess) {
    return st;
  }
  if (count == 0) return nrtSuccess;
  return stream->submit(copy_task(dst, src, count, kind));
}

nrtStatus nrtMemcpy(void* dst, const void* src, size_t count, nrtMemcpyKind kind) {
  if (nrtStatus st = api_enter(); st != nrtSuccess) return st;
  CopyPlan plan;
  if (nrtStatus st = check_copy("nrtMemcpy", dst, src, count, kind, &plan); st != nrtSuccess) {
    return st;
  }
  if (count == 0) return nrtSuccess;
  if (kind == nrtMemcpyHostToHost) {
    std::memmove(dst, src, count);
    return nrtSuccess;
  }
  // Order after the default stream of the device(s) involved: the copy runs
  // on the source device's default stream (the destination's for uploads).
  const int device = plan.src_device >= 0 ? plan.src_device : plan.dst_device;
  nrtStream_t stream = nullptr;
  if (nrtStatus st = nrtStreamGetDefault(&stream, device); st != nrtSuccess) return st;
  if (plan.dst_device >= 0 && plan.dst_device != device) {
    nrtStream_t other = nullptr;
    if (nrtStatus st = nrtStreamGetDefault(&other, plan.dst_device); st != nrtSuccess) return st;
    other->synchronize(/*consume=*/false);
  }
  if (current_worker_stream() == stream) {
    // Called from work on that very stream: everything before it is done.
    std::memmove(dst, src, count);
    return nrtSuccess;
  }
  uint64_t seq = 0;
  if (nrtStatus st = stream->enqueue(copy_task(dst, src, count, kind),
                                     /*report_failure=*/true, &seq);
      st != nrtSuccess) {
    return st;
  }
  stream->wait_for(seq);
  // A failure of earlier work means the copy was skipped: report it.
  return stream->report_failure();
}

}  // extern "C"
