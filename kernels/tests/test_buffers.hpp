// Test helpers shared by the kernel suites: typed buffers filled from
// doubles, and a parallel-for on real threads (so chunk boundaries and data
// races are exercised, under TSan too).
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "neuronkernels/types.hpp"
#include "../src/numeric.hpp"

namespace nk_test {

namespace nk = neuronkernels;

// A buffer of n elements of `dtype`, filled from doubles.
struct Buffer {
  nk::DType dtype;
  std::vector<uint8_t> bytes;
  Buffer(nk::DType t, size_t n) : dtype(t), bytes(n * nk::dtype_size(t)) {}
  void set(size_t i, double v) {
    if (dtype == nk::DType::kFloat32) {
      reinterpret_cast<float*>(bytes.data())[i] = float(v);
    } else if (dtype == nk::DType::kBFloat16) {
      reinterpret_cast<uint16_t*>(bytes.data())[i] = nk::f32_to_bf16(float(v));
    } else {
      reinterpret_cast<uint16_t*>(bytes.data())[i] = nk::f32_to_f16(float(v));
    }
  }
  double get(size_t i) const {
    if (dtype == nk::DType::kFloat32) return reinterpret_cast<const float*>(bytes.data())[i];
    uint16_t h = reinterpret_cast<const uint16_t*>(bytes.data())[i];
    return dtype == nk::DType::kBFloat16 ? nk::bf16_to_f32(h) : nk::f16_to_f32(h);
  }
  void* data() { return bytes.data(); }
};

// v rounded to type t as a store of it rounds (through float32, as the kernels compute).
inline double rounded(double v, nk::DType t) { return nk::round_to(static_cast<float>(v), t); }

inline void threaded_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t workers = 3;
  std::vector<std::thread> ts;
  for (int64_t w = 0; w < workers; ++w) {
    int64_t b = n * w / workers, e = n * (w + 1) / workers;
    if (b < e) ts.emplace_back([&, b, e] { body(b, e); });
  }
  for (auto& t : ts) t.join();
}

}  // namespace nk_test
