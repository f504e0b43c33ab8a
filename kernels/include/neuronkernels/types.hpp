// Shared vocabulary of the device's kernels: element types, strided views of
// raw buffers, and the parallel-for the caller lends the kernels.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <stdexcept>

namespace neuronkernels {

enum class DType : uint8_t { kFloat32, kBFloat16, kFloat16 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "?";
}

// A 4-D view of a raw buffer: sizes and strides in elements. Broadcast
// dimensions have stride 0.
struct View4 {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::array<int64_t, 4> sizes{};
  std::array<int64_t, 4> strides{};

  int64_t offset(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3];
  }
};

// Raised for arguments the kernels cannot take (the torch layer checks first
// and names the op; this guards direct users).
struct KernelError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// Runs body(begin, end) over the chunks of [0, n), possibly in parallel. The
// caller provides it so that kernels share the host's thread pool instead of
// starting their own.
using ParallelFor =
    std::function<void(int64_t n, const std::function<void(int64_t begin, int64_t end)>& body)>;

// Runs everything on the calling thread.
inline void serial_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (n > 0) body(0, n);
}

}  // namespace neuronkernels
