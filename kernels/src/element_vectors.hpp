// Element types as vectors of float32 at one instruction-set level: loads
// that widen bfloat16 and float16 to float32, and stores (and round trips)
// that round float32 to them to nearest even, as PyTorch's c10::BFloat16 and
// c10::Half do. Included by the kernel body files *inside* their ISA region
// and namespace (every function compiled with the level's instructions); it
// includes nothing itself and names its vectors by NK_VEC_LANES, so it can
// sit next to attention_vec.hpp or matmul_vectors.hpp.

typedef float vecf __attribute__((vector_size(NK_VEC_LANES * 4)));
typedef uint32_t vecu32 __attribute__((vector_size(NK_VEC_LANES * 4)));
typedef uint16_t vecu16 __attribute__((vector_size(NK_VEC_LANES * 2)));

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

inline vecu32 f32_bits(vecf v) {
  vecu32 u;
  __builtin_memcpy(&u, &v, sizeof u);
  return u;
}

// Element types by DType: storage; loads and stores as float32, one element
// or one vector (NK_VEC_LANES elements) at a time; round_vec, what a store
// and a load give back.
template <DType D>
struct Elem;

template <>
struct Elem<DType::kFloat32> {
  using Storage = float;
  static float load(const float* p) { return *p; }
  static vecf load_vec(const float* p) { return load_f32x(p); }
  static void store(float* p, float v) { *p = v; }
  static void store_vec(float* p, vecf v) { __builtin_memcpy(p, &v, sizeof v); }
  static vecf round_vec(vecf v) { return v; }
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
  // The upper 16 bits of each lane's bfloat16, as store computes them.
  static vecu32 rounded_high_bits(vecf v) {
    const vecu32 u = f32_bits(v);
    const vecu32 nan = (vecu32)((u & 0x7fffffffu) > 0x7f800000u);  // all ones where NaN
    const vecu32 nearest = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return (nearest & ~nan) | (((u >> 16) | 0x40u) & nan);
  }
  static void store_vec(uint16_t* p, vecf v) {
    const vecu16 h = __builtin_convertvector(rounded_high_bits(v), vecu16);
    __builtin_memcpy(p, &h, sizeof h);
  }
  static vecf round_vec(vecf v) { return bits_as_f32(rounded_high_bits(v) << 16); }
};

template <>
struct Elem<DType::kFloat16> {
  using Storage = uint16_t;
  static float load(const uint16_t* p) {
    _Float16 h;
    __builtin_memcpy(&h, p, sizeof h);
    return float(h);
  }
  static void store(uint16_t* p, float v) {
    const _Float16 h = static_cast<_Float16>(v);
    __builtin_memcpy(p, &h, sizeof h);
  }
#if NK_ISA_LEVEL > 0
  // vcvtph2ps and vcvtps2ph (F16C). GCC turns __builtin_convertvector of
  // _Float16 vectors into one conversion per element, hence the intrinsics.
  static vecf load_vec(const uint16_t* p) {
#if NK_VEC_LANES == 16
    // (maskz with every lane set: plain vcvtph2ps, and no uninitialized pass-through
    // operand for GCC 12 to warn about)
    return (vecf)_mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#else
    return (vecf)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
  }
  static void store_vec(uint16_t* p, vecf v) {
#if NK_VEC_LANES == 16
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtps_ph(__mmask16(0xffff), (__m512)v,
                                                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
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
    vecu32 bits = f32_bits(scaled);
    bits |= (vecu32)(magnitude >= 0x0f800000u) & 0x7f800000u;  // exponent 31 in f16
    return bits_as_f32(bits | (u & 0x8000u) << 16);
  }
  static void store_vec(uint16_t* p, vecf v) {  // (rare at this level: element by element)
    for (int i = 0; i < NK_VEC_LANES; ++i) store(p + i, v[i]);
  }
#endif
  static vecf round_vec(vecf v) {
    uint16_t h[NK_VEC_LANES];
    store_vec(h, v);
    return load_vec(h);
  }
};

// n elements of type D from p as float32 into dst, and back.
template <DType D>
inline void load_row(const typename Elem<D>::Storage* p, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + NK_VEC_LANES <= n; i += NK_VEC_LANES) {
    const vecf v = Elem<D>::load_vec(p + i);
    __builtin_memcpy(dst + i, &v, sizeof v);
  }
  for (; i < n; ++i) dst[i] = Elem<D>::load(p + i);
}
template <DType D>
inline void store_row(const float* src, int64_t n, typename Elem<D>::Storage* p) {
  int64_t i = 0;
  for (; i + NK_VEC_LANES <= n; i += NK_VEC_LANES) Elem<D>::store_vec(p + i, load_f32x(src + i));
  for (; i < n; ++i) Elem<D>::store(p + i, src[i]);
}

// The same with the type chosen at run time (one switch per row).
inline void load_row(const void* p, DType t, int64_t n, float* dst) {
  switch (t) {
    case DType::kFloat32: return load_row<DType::kFloat32>(static_cast<const float*>(p), n, dst);
    case DType::kBFloat16: return load_row<DType::kBFloat16>(static_cast<const uint16_t*>(p), n, dst);
    case DType::kFloat16: return load_row<DType::kFloat16>(static_cast<const uint16_t*>(p), n, dst);
  }
}
inline void store_row(const float* src, int64_t n, DType t, void* p) {
  switch (t) {
    case DType::kFloat32: return store_row<DType::kFloat32>(src, n, static_cast<float*>(p));
    case DType::kBFloat16: return store_row<DType::kBFloat16>(src, n, static_cast<uint16_t*>(p));
    case DType::kFloat16: return store_row<DType::kFloat16>(src, n, static_cast<uint16_t*>(p));
  }
}
