// neuronrt: the software NeuronCore runtime, C API.
//
// A CUDA-runtime-shaped API over a software device: each logical NeuronCore
// has its own memory ("HBM", host memory underneath, capacity enforced),
// in-order streams served by one worker thread each, events, and DMA-style
// copies. Every call returns a status; nrtGetLastErrorMessage() gives the
// calling thread's detailed message for the last failing call.
//
// This header is torch-free and C-compatible.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nrtStatus {
  nrtSuccess = 0,
  nrtErrorInvalidValue = 1,      // a bad argument (null pointer, bad kind, ...)
  nrtErrorInvalidDevice = 2,     // device index out of range
  nrtErrorMemoryAllocation = 3,  // device (or pinned host) memory exhausted
  nrtErrorNotReady = 4,          // query: work still pending (not a failure)
  nrtErrorLaunchFailure = 5,     // queued work failed; message names the op
  nrtErrorInvalidHandle = 6,     // unknown stream/event/pointer
  nrtErrorForkedChild = 7,       // runtime used after fork() in the child
  nrtErrorInvalidConfiguration = 8,  // bad environment variable value
} nrtStatus;

// Human-readable name of a status ("nrtErrorMemoryAllocation", ...).
const char* nrtGetErrorString(nrtStatus status);
// The calling thread's message for its last failing call ("" if none).
const char* nrtGetLastErrorMessage(void);

// ---- Devices ---------------------------------------------------------------
typedef struct nrtDeviceProp {
  char name[64];              // "NeuronCore-v3 (software)"
  size_t totalMemory;         // capacity in bytes, after the host-memory cap
  size_t requestedMemory;     // capacity asked for (TORCHNEURON_DEVICE_MEMORY or 24 GiB)
  int memoryCapped;           // 1 if totalMemory < requestedMemory (host cap applied)
  int coreCount;              // number of logical cores visible to this process
  int physicalIndex;          // index of this core in NEURON_RT_VISIBLE_CORES
} nrtDeviceProp;

// Number of visible cores. Reads NEURON_RT_VISIBLE_CORES ("0-3", "0,2"),
// else NEURON_RT_NUM_CORES, else 2. Never starts threads.
nrtStatus nrtGetDeviceCount(int* count);
nrtStatus nrtGetDeviceProperties(nrtDeviceProp* prop, int device);
// Per-thread current device (default 0; under torchrun LOCAL_RANK when that
// core is visible).
nrtStatus nrtSetDevice(int device);
nrtStatus nrtGetDevice(int* device);
// Waits for all streams of the device; reports (and clears) their first errors.
nrtStatus nrtDeviceSynchronize(int device);

// ---- Raw device memory (no caching; capacity enforced) ---------------------
// Memory is 64-byte aligned. size 0 returns a null pointer and nrtSuccess.
nrtStatus nrtMalloc(void** ptr, size_t size, int device);
nrtStatus nrtFree(void* ptr);
// free = capacity - bytes held by raw allocations on that device.
nrtStatus nrtMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes);
// device index of the raw allocation containing ptr, or -1 if none.
nrtStatus nrtPointerGetDevice(const void* ptr, int* device);

// Where raw device memory comes from. By default it is host memory of this
// process; a source (e.g. memory other processes can map, so that
// collectives read peers' buffers directly) serves every nrtMalloc of at
// least `min_bytes` on any device: `allocate` returns a block aligned to
// `alignment` (a power of two, at most 2 MiB), or null when the source is
// exhausted, and then host memory serves the request. `deallocate` gets
// blocks back from nrtFree. Thread-safe callbacks; `ctx` is theirs.
typedef struct nrtMemorySource {
  void* ctx;
  void* (*allocate)(void* ctx, size_t bytes, size_t alignment);
  void (*deallocate)(void* ctx, void* ptr);
  size_t min_bytes;
} nrtMemorySource;
// Installs `source` (copied) for the allocations that follow; null removes
// it. Refused (nrtErrorInvalidValue) while blocks of a previous source are
// live. Blocks already allocated keep their origin. Reads no configuration
// (callable when a library loads).
nrtStatus nrtSetMemorySource(const nrtMemorySource* source);

// ---- Pinned host memory ----------------------------------------------------
nrtStatus nrtHostAlloc(void** ptr, size_t size);
nrtStatus nrtFreeHost(void* ptr);
// 1 if ptr lies inside a live nrtHostAlloc block.
int nrtIsPinnedPointer(const void* ptr);

// ---- Streams ---------------------------------------------------------------
typedef struct nrtStream_st* nrtStream_t;

// The default stream of a device (created on first use, never destroyed).
nrtStatus nrtStreamGetDefault(nrtStream_t* stream, int device);
nrtStatus nrtStreamCreate(nrtStream_t* stream, int device, int priority);
nrtStatus nrtStreamDestroy(nrtStream_t stream);  // waits for its queued work
nrtStatus nrtStreamSynchronize(nrtStream_t stream);
// nrtSuccess if idle, nrtErrorNotReady if work is pending.
nrtStatus nrtStreamQuery(nrtStream_t stream);
int nrtStreamGetDeviceIndex(nrtStream_t stream);
// Small, stable id of a stream within its device: 0 is the default stream.
int64_t nrtStreamGetId(nrtStream_t stream);

// Enqueues fn(user) on the stream. A non-zero return marks the op as failed:
// the stream keeps the first failure ("<op_name> failed on neuron:<d>:
// <message>"), skips the rest of the work queued behind it, and returns
// nrtErrorLaunchFailure from the next enqueue or synchronize on that stream
// (clearing the slot). op_name must stay valid until the work has run (a
// string literal, for instance).
typedef int (*nrtHostFn)(void* user, char* message, size_t message_size);
nrtStatus nrtLaunchHostFunc(nrtStream_t stream, nrtHostFn fn, void* user,
                            const char* op_name);

typedef enum nrtMemcpyKind {
  nrtMemcpyHostToHost = 0,
  nrtMemcpyHostToDevice = 1,
  nrtMemcpyDeviceToHost = 2,
  nrtMemcpyDeviceToDevice = 3,
} nrtMemcpyKind;
nrtStatus nrtMemcpyAsync(void* dst, const void* src, size_t count,
                         nrtMemcpyKind kind, nrtStream_t stream);
// Synchronous copy: ordered after the work queued on the default stream of
// the device involved, and waits for it.
nrtStatus nrtMemcpy(void* dst, const void* src, size_t count,
                    nrtMemcpyKind kind);

// ---- Events ----------------------------------------------------------------
typedef struct nrtEvent_st* nrtEvent_t;
enum { nrtEventDefault = 0, nrtEventDisableTiming = 1 };
nrtStatus nrtEventCreate(nrtEvent_t* event, unsigned flags);
nrtStatus nrtEventDestroy(nrtEvent_t event);
// Captures the work queued on the stream so far; completes after it.
nrtStatus nrtEventRecord(nrtEvent_t event, nrtStream_t stream);
// nrtSuccess if complete (or never recorded), nrtErrorNotReady otherwise.
nrtStatus nrtEventQuery(nrtEvent_t event);
nrtStatus nrtEventSynchronize(nrtEvent_t event);
// Work queued on `stream` after this call waits for the event's capture.
nrtStatus nrtStreamWaitEvent(nrtStream_t stream, nrtEvent_t event);
// Milliseconds between two completed, timing-enabled events.
nrtStatus nrtEventElapsedTime(float* ms, nrtEvent_t start, nrtEvent_t end);

#ifdef __cplusplus
}  // extern "C"
#endif
