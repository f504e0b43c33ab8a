#include "csrc/aten/native/Bf16Brgemm.h"

#include <emmintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/ones.h>

#include "csrc/aten/native/KernelSupport.h"
#include "neuronkernels/isa.hpp"

namespace torchneuron::native {
namespace {

// One microkernel call: kRows rows of A by kCols columns of B, reduced over a
// slice of kDepth (even) of the shared dimension; the float32 result tile (32
// KiB) stays in L1 across the slices. Tiles go to the threads in row-block
// order, so that a thread's consecutive tiles read the same rows of A. Chosen
// on an AMD EPYC Zen 5 (2 threads) among 64-256 rows and 256-512 deep, on
// TRL's LM-head gradients ([510, 32000] x [32000, 768] and [32000, 510] x
// [510, 768]): 27-29 ms each, 870-910 GFLOP/s, against 870-990 for ATen's
// bfloat16 mm with a bfloat16 result; a call over the whole depth ran at 110
// (its rows of A stream at once).
constexpr int64_t kRows = 128, kCols = 64, kDepth = 256;

// Memory reused by the calls of one worker thread (the packed B; A or B
// copied to row-major): a training step repeats the same products, and fresh
// buffers of their size would be faulted in again on every call. It keeps
// the largest size asked for, in huge pages where the kernel gives them
// (advice, as the device's memory asks: the microkernel streams B, and with
// 4 KiB pages the product of TRL's LM head ran 10-20% slower).
class Scratch {
 public:
  uint16_t* get(size_t elements) {
    if (elements > size_) {
      constexpr size_t kHugePage = size_t{2} << 20;
      const size_t bytes = (elements * sizeof(uint16_t) + kHugePage - 1) / kHugePage * kHugePage;
      data_.reset();  // the old buffer goes first: no two at once
      size_ = 0;
      data_.reset(static_cast<uint16_t*>(std::aligned_alloc(kHugePage, bytes)));
      TORCH_CHECK(data_ != nullptr, "[neuron] mixed-precision GEMM: out of host memory for ", bytes,
                  " bytes of packed operands");
#ifdef MADV_HUGEPAGE
      madvise(data_.get(), bytes, MADV_HUGEPAGE);
#endif
      size_ = bytes / sizeof(uint16_t);
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(uint16_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint16_t, Free> data_;
  size_t size_ = 0;
};

// B's columns [n0, n0 + cols) of rows [0, depth) (depth even, row-major with
// row stride ldb) in the microkernel's VNNI layout: each pair of rows
// interleaved, out[(k / 2) * 2 * kCols + 2 * n + k % 2], columns past `cols`
// zero.
void pack_columns(const uint16_t* b, int64_t ldb, int64_t depth, int64_t cols, uint16_t* out) {
  for (int64_t k = 0; k < depth; k += 2) {
    const uint16_t* r0 = b + k * ldb;
    const uint16_t* r1 = r0 + ldb;
    uint16_t* o = out + k * kCols;
    if (cols == kCols) {
      for (int64_t n = 0; n < kCols; n += 8) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + n));
        const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + n));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * n), _mm_unpacklo_epi16(x, y));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * n + 8), _mm_unpackhi_epi16(x, y));
      }
    } else {
      for (int64_t n = 0; n < kCols; ++n) {
        o[2 * n] = n < cols ? r0[n] : 0;
        o[2 * n + 1] = n < cols ? r1[n] : 0;
      }
    }
  }
}

// dst[c][r] = src[r][c] for a row-major [rows, cols] matrix of 16-bit
// values, in 8 x 8 blocks transposed in registers; parallel over blocks of
// 64 source rows.
void transpose(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds, uint16_t* dst, int64_t ldd,
               const neuronkernels::ParallelFor& parallel_for) {
  constexpr int64_t kBlock = 64;
  parallel_for((rows + kBlock - 1) / kBlock, [&](int64_t begin, int64_t end) {
    const int64_t r_end = std::min(rows, end * kBlock);
    for (int64_t c0 = 0; c0 < cols; c0 += 8) {
      for (int64_t r0 = begin * kBlock; r0 < r_end; r0 += 8) {
        if (r0 + 8 > rows || c0 + 8 > cols) {
          for (int64_t r = r0; r < std::min(rows, r0 + 8); ++r) {
            for (int64_t c = c0; c < std::min(cols, c0 + 8); ++c) dst[c * ldd + r] = src[r * lds + c];
          }
          continue;
        }
        __m128i x[8], p[8], q[8];
        for (int i = 0; i < 8; ++i) x[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + (r0 + i) * lds + c0));
        for (int i = 0; i < 4; ++i) {  // pairs of rows interleaved
          p[2 * i] = _mm_unpacklo_epi16(x[2 * i], x[2 * i + 1]);
          p[2 * i + 1] = _mm_unpackhi_epi16(x[2 * i], x[2 * i + 1]);
        }
        for (int h = 0; h < 2; ++h) {  // then pairs of pairs
          q[4 * h + 0] = _mm_unpacklo_epi32(p[4 * h + 0], p[4 * h + 2]);
          q[4 * h + 1] = _mm_unpackhi_epi32(p[4 * h + 0], p[4 * h + 2]);
          q[4 * h + 2] = _mm_unpacklo_epi32(p[4 * h + 1], p[4 * h + 3]);
          q[4 * h + 3] = _mm_unpackhi_epi32(p[4 * h + 1], p[4 * h + 3]);
        }
        for (int i = 0; i < 4; ++i) {  // then the two halves of each column
          _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (c0 + 2 * i) * ldd + r0),
                           _mm_unpacklo_epi64(q[i], q[4 + i]));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (c0 + 2 * i + 1) * ldd + r0),
                           _mm_unpackhi_epi64(q[i], q[4 + i]));
        }
      }
    }
  });
}

// A row-major view of a bfloat16 matrix: `t` itself when its columns are
// unit-strided and its rows do not overlap, else a copy in `scratch`. A
// transposed matrix (TRL's LM-head tile in its weight gradient) is copied by
// `transpose`: ATen's copy of a transposed [32000, 510] bfloat16 matrix took
// 25 ms on an AMD EPYC Zen 5.
const uint16_t* row_major(const at::Tensor& t, Scratch& scratch, const neuronkernels::ParallelFor& parallel_for,
                          int64_t* ld) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (t.stride(1) == 1 && (rows <= 1 || t.stride(0) >= cols)) {
    *ld = rows <= 1 ? cols : t.stride(0);
    return static_cast<const uint16_t*>(t.const_data_ptr());
  }
  uint16_t* copy = scratch.get(static_cast<size_t>(rows * cols));
  *ld = cols;
  if (t.stride(0) == 1 && (cols <= 1 || t.stride(1) >= rows)) {
    transpose(static_cast<const uint16_t*>(t.const_data_ptr()), cols, rows, cols <= 1 ? rows : t.stride(1), copy, cols,
              parallel_for);
  } else {
    at::from_blob(copy, {rows, cols}, t.options()).copy_(t);
  }
  return copy;
}

// y[rows, cols] (+)= a[:, k0:k1] . b[k0:k1, :] in float32 (products of
// bfloat16 values are exact there), row-major with the given strides.
void rest_of_tile_in_float32(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float* y, int64_t ldy,
                             int64_t rows, int64_t cols, int64_t k0, int64_t k1, bool accumulate) {
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
  const at::Tensor a32 = at::from_blob(const_cast<uint16_t*>(a + k0), {rows, k1 - k0}, {lda, 1}, bf16).to(at::kFloat);
  const at::Tensor b32 =
      at::from_blob(const_cast<uint16_t*>(b + k0 * ldb), {k1 - k0, cols}, {ldb, 1}, bf16).to(at::kFloat);
  at::Tensor out = at::from_blob(y, {rows, cols}, {ldy, 1}, at::TensorOptions().dtype(at::kFloat));
  if (accumulate) {
    at::addmm_out(out, out, a32, b32);
  } else {
    at::mm_out(out, a32, b32);
  }
}

void run(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, bool accumulate,
         const neuronkernels::ParallelFor& parallel_for) {
  const int64_t M = Y.size(0), N = Y.size(1), K = A.size(1);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) Y.zero_();
    return;
  }
  thread_local Scratch a_copy, b_copy, b_packed;
  int64_t lda = 0, ldb = 0;
  const uint16_t* a = row_major(A, a_copy, parallel_for, &lda);
  const uint16_t* b = row_major(B, b_copy, parallel_for, &ldb);
  float* y = Y.mutable_data_ptr<float>();
  const int64_t ldy = M <= 1 ? N : Y.stride(0);

  // The microkernel reduces over pairs of rows of B: an odd depth's last row
  // is added as a rank-1 update below.
  const int64_t depth = K - K % 2;
  const int64_t col_blocks = (N + kCols - 1) / kCols, row_blocks = (M + kRows - 1) / kRows;
  uint16_t* packed = b_packed.get(static_cast<size_t>(std::max<int64_t>(col_blocks * depth * kCols, 1)));
  parallel_for(col_blocks, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      pack_columns(b + j * kCols, ldb, depth, std::min(kCols, N - j * kCols), packed + j * depth * kCols);
    }
  });

  parallel_for(col_blocks * row_blocks, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t i = t / col_blocks, j = t % col_blocks;
      const int64_t m0 = i * kRows, rows = std::min(kRows, M - m0), n0 = j * kCols, cols = std::min(kCols, N - n0);
      const auto* a_tile = reinterpret_cast<const at::BFloat16*>(a + m0 * lda);
      const auto* b_block = reinterpret_cast<const at::BFloat16*>(packed + j * depth * kCols);
      float* y_tile = y + m0 * ldy + n0;
      for (int64_t k0 = 0; k0 < depth; k0 += kDepth) {
        try {
          at::native::cpublas::brgemm(rows, cols, std::min(kDepth, depth - k0), lda, kCols, ldy,
                                      accumulate || k0 > 0, a_tile + k0, b_block + k0 * kCols, y_tile,
                                      /*is_vnni=*/true);
        } catch (const c10::Error&) {
          // ATen checks torch.backends.mkldnn.enabled at every call: turned
          // off while this product ran, the calls left throw. The rest of the
          // tile's depth then goes through a float32 product.
          if (at::globalContext().userEnabledMkldnn()) throw;
          rest_of_tile_in_float32(a + m0 * lda, lda, b + n0, ldb, y_tile, ldy, rows, cols, k0, depth,
                                  accumulate || k0 > 0);
          break;
        }
      }
      if (depth < K) {
        const uint16_t* b_last = b + (K - 1) * ldb + n0;
        for (int64_t r = 0; r < rows; ++r) {
          const float a_last = c10::detail::f32_from_bits(a[(m0 + r) * lda + K - 1]);
          float* y_row = y_tile + r * ldy;
          for (int64_t c = 0; c < cols; ++c) {
            const float p = a_last * c10::detail::f32_from_bits(b_last[c]);
            y_row[c] = depth > 0 || accumulate ? y_row[c] + p : p;
          }
        }
      }
    }
    at::native::cpublas::brgemm_release(/*is_vnni=*/true);
  });
}

// The microkernel against ATen's float32 product on a small case with every
// edge (a partial row and column tile, an odd depth, accumulation): false
// when it throws (a torch build without oneDNN's microkernel) or disagrees.
bool passes_self_test() {
  if (neuronkernels::isa() != neuronkernels::Isa::kAvx512Bf16) return false;
  try {
    const auto bf16 = at::TensorOptions().dtype(at::kBFloat16);
    const at::Tensor a = at::arange(3 * 37, bf16).reshape({3, 37}).remainder(7).sub(3);
    const at::Tensor b = at::arange(37 * 70, bf16).reshape({37, 70}).remainder(5).sub(2);
    const at::Tensor y = at::ones({3, 70});
    run(a, b, y, /*accumulate=*/true, neuronkernels::serial_for);
    const at::Tensor expected = at::mm(a.to(at::kFloat), b.to(at::kFloat)).add(1);
    return at::equal(y, expected);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

bool bf16_brgemm_available() {
  if (!at::globalContext().userEnabledMkldnn()) return false;
  static const bool works = passes_self_test();
  return works;
}

void bf16_brgemm(const at::Tensor& A, const at::Tensor& B, const at::Tensor& Y, bool accumulate) {
  // ATen's OpenMP team, as oneDNN's own GEMMs use it: on TRL's LM-head
  // gradients it ran 28-30 ms a product where the runtime's compute threads
  // (kernel_parallel_for, for short kernels) ran 35-38. A team's helpers spin
  // for milliseconds after a region, which matters between the short ops of a
  // decode step, not after a product of tens of milliseconds.
  const int64_t work = Y.size(0) * Y.size(1) * A.size(1);
  run(A, B, Y, accumulate, [work](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    if (work < kMinParallelWork) {
      neuronkernels::serial_for(n, body);
    } else {
      at::parallel_for(0, n, 1, body);
    }
  });
}

}  // namespace torchneuron::native
