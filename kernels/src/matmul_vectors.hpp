// Vectors and lane sums of the skinny matmul, at one instruction-set level.
// Included by matmul_impl.cpp *inside* its ISA region and namespace, after
// element_vectors.hpp (vecf, Elem), so every function here is compiled with
// that level's instructions (a helper from a header included before the
// region would be baseline code wherever GCC does not inline it). It
// includes nothing itself.

constexpr int kLanes = NK_VEC_LANES;  // float32 lanes of one native vector register

typedef int32_t veci __attribute__((vector_size(kLanes * 4)));
// The lane sums of four accumulators at once: pairwise shuffles fold them
// into one vector (four times fewer adds than summing each on its own).
inline void lane_sums4(const vecf a[4], float out[4]) {
#if NK_VEC_LANES == 16
  const veci lo = {0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29};
  const veci hi = {2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31};
  const veci even = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
  const veci odd = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
#elif NK_VEC_LANES == 8
  const veci lo = {0, 8, 1, 9, 4, 12, 5, 13};
  const veci hi = {2, 10, 3, 11, 6, 14, 7, 15};
  const veci even = {0, 1, 8, 9, 4, 5, 12, 13};
  const veci odd = {2, 3, 10, 11, 6, 7, 14, 15};
#else
  const veci lo = {0, 4, 1, 5};
  const veci hi = {2, 6, 3, 7};
  const veci even = {0, 1, 4, 5};
  const veci odd = {2, 3, 6, 7};
#endif
  // Lanes (4q + r) of ab hold partial sums of a[0] (r even) and a[1] (r odd).
  const vecf ab = __builtin_shuffle(a[0], a[1], lo) + __builtin_shuffle(a[0], a[1], hi);
  const vecf cd = __builtin_shuffle(a[2], a[3], lo) + __builtin_shuffle(a[2], a[3], hi);
  // Lane (4q + j) of abcd holds a partial sum of a[j].
  const vecf abcd = __builtin_shuffle(ab, cd, even) + __builtin_shuffle(ab, cd, odd);
  float l[kLanes];
  __builtin_memcpy(l, &abcd, sizeof l);
  for (int j = 0; j < 4; ++j) {
#if NK_VEC_LANES == 16
    out[j] = (l[j] + l[4 + j]) + (l[8 + j] + l[12 + j]);
#elif NK_VEC_LANES == 8
    out[j] = l[j] + l[4 + j];
#else
    out[j] = l[j];
#endif
  }
}

// The lane sums of Count accumulators, four at a time; out has room for
// Count rounded up to a multiple of four.
template <int Count>
inline void lane_sums(const vecf* acc, float* out) {
  for (int g = 0; g < Count; g += 4) {
    vecf four[4];
    for (int j = 0; j < 4; ++j) four[j] = g + j < Count ? acc[g + j] : vecf{};
    lane_sums4(four, out + g);
  }
}

// A hint to fetch the line at p for reading, with little cache pollution.
inline void prefetch_line(const void* p) { __builtin_prefetch(p, 0, 0); }
