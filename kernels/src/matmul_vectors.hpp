// Vectors and element conversions of the skinny matmul, at one instruction-set
// level. Included by matmul_impl.cpp *inside* its ISA region and namespace, so
// every function here is compiled with that level's instructions (a helper
// from a header included before the region would be baseline code wherever
// GCC does not inline it). It includes nothing itself.

constexpr int kLanes = NK_VEC_LANES;  // float32 lanes of one native vector register

typedef float vecf __attribute__((vector_size(kLanes * 4)));
typedef int32_t veci __attribute__((vector_size(kLanes * 4)));
typedef uint32_t vecu32 __attribute__((vector_size(kLanes * 4)));
typedef uint16_t vecu16 __attribute__((vector_size(kLanes * 2)));

inline vecf load_f32x(const float* p) {
  vecf v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}

inline vecf bits_as_f32(vecu32 bits) {
  vecf v;
  __builtin_memcpy(&v, &bits, sizeof v);
  return v;
}

inline float bits_as_f32(uint32_t bits) {
  float f;
  __builtin_memcpy(&f, &bits, sizeof f);
  return f;
}

// Element types by DType: storage, and loads and stores as float32.
template <DType D>
struct Elem;

template <>
struct Elem<DType::kFloat32> {
  using Storage = float;
  static float load(const float* p) { return *p; }
  static vecf load_vec(const float* p) { return load_f32x(p); }
  static void store(float* p, float v) { *p = v; }
};

template <>
struct Elem<DType::kBFloat16> {
  using Storage = uint16_t;
  static float load(const uint16_t* p) { return bits_as_f32(uint32_t(*p) << 16); }
  static vecf load_vec(const uint16_t* p) {
    vecu16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return bits_as_f32(__builtin_convertvector(h, vecu32) << 16);
  }
  // Round to nearest even, as PyTorch's c10::BFloat16 does; NaN stays NaN.
  static void store(uint16_t* p, float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      *p = uint16_t((u >> 16) | 0x40u);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    *p = uint16_t(u >> 16);
  }
};

template <>
struct Elem<DType::kFloat16> {
  using Storage = uint16_t;
  static float load(const uint16_t* p) {
    _Float16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return float(h);
  }
#if NK_ISA_LEVEL > 0
  // vcvtph2ps (F16C). GCC turns __builtin_convertvector of _Float16 vectors
  // into one vcvtph2ps per element, hence the intrinsics.
  static vecf load_vec(const uint16_t* p) {
#if NK_VEC_LANES == 16
    // (maskz with every lane set: plain vcvtph2ps, and no uninitialized pass-through
    // operand for GCC 12 to warn about)
    return (vecf)_mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#else
    return (vecf)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
  }
#else
  // Without F16C, GCC converts _Float16 element by element in a library call;
  // integer arithmetic converts every value exactly instead: the exponent and
  // mantissa bits moved into place are scaled by 2^112 (subnormals become
  // normal floats), infinities and NaNs get the all-ones exponent.
  static vecf load_vec(const uint16_t* p) {
    vecu16 h;
    __builtin_memcpy(&h, p, sizeof h);
    const vecu32 u = __builtin_convertvector(h, vecu32);
    const vecu32 magnitude = (u & 0x7fffu) << 13;
    const vecf scaled = bits_as_f32(magnitude) * bits_as_f32(uint32_t(0x77800000u));
    vecu32 bits;
    __builtin_memcpy(&bits, &scaled, sizeof bits);
    bits |= (vecu32)(magnitude >= 0x0f800000u) & 0x7f800000u;  // exponent 31 in f16
    return bits_as_f32(bits | (u & 0x8000u) << 16);
  }
#endif
  static void store(uint16_t* p, float v) {
    const _Float16 h = static_cast<_Float16>(v);
    __builtin_memcpy(p, &h, sizeof h);
  }
};

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
