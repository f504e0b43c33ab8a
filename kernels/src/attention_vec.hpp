// Vectors of the level's native width and the register-tiled product the
// attention kernels are built on. Included by attention_impl.cpp INSIDE its
// instruction-set region and namespace (so no #include here): every function
// below is compiled with the level's instructions, and the vector width and
// tile sizes follow NK_VEC_LANES.

// One native register: 4 floats (SSE2), 8 (AVX2) or 16 (AVX-512).
constexpr int64_t kLanes = NK_VEC_LANES;
typedef float vec __attribute__((vector_size(NK_VEC_LANES * 4)));
typedef int32_t veci __attribute__((vector_size(NK_VEC_LANES * 4)));

// Register tile of the product: kTileRows rows by kTileVecs vectors of
// columns. The accumulators, the kTileVecs operand vectors and one broadcast
// must fit the register file: 12 x 2 + 2 + 1 = 27 of 32 zmm on AVX-512;
// 6 x 2 + 2 + 1 = 15 of 16 ymm/xmm on AVX2 and baseline (the classic 6x16
// sgemm kernel). The loop is then bound by the multiply-adds, not by the
// loads (one broadcast per two FMAs): on AMD Zen 4 the forward of a causal
// 2048-token prefill ran at 80 GFLOP/s on one core with 12 x 2, against 75
// with the 4 x 4 first tuned on Zen 5.
#if NK_VEC_LANES >= 16
constexpr int kTileRows = 12;
constexpr int kTileVecs = 2;
#else
constexpr int kTileRows = 6;
constexpr int kTileVecs = 2;
#endif

inline vec vload(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void vstore(float* p, vec v) { std::memcpy(p, &v, sizeof v); }
// Lane 0 shuffled into every lane (`vec{} + x` would be an add: 0 + -0 is +0).
inline vec vsplat(float x) { return __builtin_shuffle(vec{x}, veci{}); }

inline vec vmax(vec a, vec b) { return a > b ? a : b; }

// Across-lane reductions in log2(kLanes) shuffle steps (lane t meets lane
// t ^ S), instead of a chain of kLanes - 1 dependent scalar operations.
template <int S, int... T>
constexpr veci swap_mask(std::integer_sequence<int, T...>) {
  return veci{(T ^ S)...};
}
template <int S = kLanes / 2>
inline vec all_lanes_sum(vec v) {
  v += __builtin_shuffle(v, swap_mask<S>(std::make_integer_sequence<int, kLanes>{}));
  if constexpr (S > 1) return all_lanes_sum<S / 2>(v);
  return v;
}
template <int S = kLanes / 2>
inline vec all_lanes_max(vec v) {
  v = vmax(v, __builtin_shuffle(v, swap_mask<S>(std::make_integer_sequence<int, kLanes>{})));
  if constexpr (S > 1) return all_lanes_max<S / 2>(v);
  return v;
}
inline float hsum(vec v) { return all_lanes_sum(v)[0]; }
inline float hmax(vec v) { return all_lanes_max(v)[0]; }

// exp_f32 (numeric.hpp) on a whole vector, step for step the same. With
// kAtMostZero the caller guarantees x <= 0 or NaN (a softmax's x - max): the
// upper clamp cannot act, and a NaN already comes out of the polynomial as
// NaN, so both checks go (exp is most of the softmax's cost).
template <bool kAtMostZero = false>
inline vec exp_vec(vec x) {
  const vec lo = vsplat(-87.33654f), hi = vsplat(88.0f);
  vec xc = x < lo ? lo : x;
  if constexpr (!kAtMostZero) xc = xc > hi ? hi : xc;
  vec n = xc * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to nearest (|n| < 2^22)
  vec r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vec poly = vsplat(1.3888889e-3f);
  poly = poly * r + 8.3333338e-3f;
  poly = poly * r + 4.1666668e-2f;
  poly = poly * r + 1.6666667e-1f;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  const veci e = __builtin_convertvector(n, veci) + 127;
  const vec scale = (vec)(e << 23);  // same-size vector casts reinterpret the bits
  vec y = poly * scale;
  y = x < lo ? vsplat(0.0f) : y;
  if constexpr (kAtMostZero) return y;
  return x != x ? x : y;  // NaN in, NaN out
}

// Operands of a product C = A . B. A is read one element at a time (and
// broadcast), so any layout works: A(i, k) = a[i * row + k * inner]. B and C
// are row-major with contiguous columns, `row` floats between rows.
struct MatA {
  const float* a;
  int64_t row, inner;
};
struct MatB {
  const float* b;
  int64_t row;
};
struct MatC {
  float* c;
  int64_t row;
};

// C[0..R) x [0..NV vectors) (+)= A[0..R) x [0..K) . B[0..K) x [same columns].
template <int R, int NV, bool kAccumulate>
inline void product_tile(MatA A, MatB B, MatC C, int64_t K) {
  vec acc[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < NV; ++c) acc[r][c] = kAccumulate ? vload(C.c + r * C.row + c * kLanes) : vec{};
  }
  for (int64_t k = 0; k < K; ++k) {
    vec b[NV];
    for (int c = 0; c < NV; ++c) b[c] = vload(B.b + k * B.row + c * kLanes);
    for (int r = 0; r < R; ++r) {
      const vec a = vsplat(A.a[r * A.row + k * A.inner]);
      for (int c = 0; c < NV; ++c) acc[r][c] += a * b[c];
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < NV; ++c) vstore(C.c + r * C.row + c * kLanes, acc[r][c]);
  }
}

// The last `rows` (< R) rows of a column strip, as one narrower tile.
template <int R, int NV, bool kAccumulate>
inline void product_tail(int64_t rows, MatA A, MatB B, MatC C, int64_t K) {
  if constexpr (R > 0) {
    if (rows == R) return product_tile<R, NV, kAccumulate>(A, B, C, K);
    product_tail<R - 1, NV, kAccumulate>(rows, A, B, C, K);
  }
}

// Rows [0, R) of C across all N columns: strips of kTileVecs vectors, then
// single vectors.
template <int R, bool kAccumulate>
inline void product_rows(int64_t N, MatA A, MatB B, MatC C, int64_t K) {
  constexpr int64_t kStrip = kTileVecs * kLanes;
  int64_t n = 0;
  for (; n + kStrip <= N; n += kStrip) {
    product_tile<R, kTileVecs, kAccumulate>(A, {B.b + n, B.row}, {C.c + n, C.row}, K);
  }
  for (; n < N; n += kLanes) product_tile<R, 1, kAccumulate>(A, {B.b + n, B.row}, {C.c + n, C.row}, K);
}

// The last `rows` (< R) rows, as one narrower tile.
template <int R, bool kAccumulate>
inline void product_tail(int64_t rows, int64_t N, MatA A, MatB B, MatC C, int64_t K) {
  if constexpr (R > 0) {
    if (rows == R) return product_rows<R, kAccumulate>(N, A, B, C, K);
    product_tail<R - 1, kAccumulate>(rows, N, A, B, C, K);
  }
}

// C (M x N) = A (M x K) . B (K x N), or += with kAccumulate; N % kLanes == 0.
// Row tiles outer: a tile's rows of A stay in L1 while it sweeps B.
template <bool kAccumulate>
void product(int64_t M, int64_t N, int64_t K, MatA A, MatB B, MatC C) {
  int64_t i = 0;
  for (; i + kTileRows <= M; i += kTileRows) {
    product_rows<kTileRows, kAccumulate>(N, {A.a + i * A.row, A.row, A.inner}, B,
                                         {C.c + i * C.row, C.row}, K);
  }
  product_tail<kTileRows - 1, kAccumulate>(M - i, N, {A.a + i * A.row, A.row, A.inner}, B,
                                           {C.c + i * C.row, C.row}, K);
}

constexpr int64_t round_up_to_lanes(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }
