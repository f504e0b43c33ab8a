// The decode path of the attention kernels: a few rows per KV head take dot
// products with each key and sums of value rows instead of product tiles.
// Included by attention_impl.cpp *inside* its ISA region and namespace,
// after its Dims, Seen, MatB and the element and lane helpers
// (element_vectors.hpp, lane_folds.hpp); it includes nothing itself.

// Below this many rows per KV head (decode), scores are dot products of each
// key row read in place; above it, a transposed float32 copy of the key block
// lets every row's scores be a product tile. The two sum over the head
// dimension in different orders, so the choice is one per problem, made
// alike by the forward and the backward (which must reproduce the forward's
// scores bitwise, see scaled_score).
constexpr int64_t kDirectRows = 8;
inline bool scores_directly(const Dims& d) { return d.G * d.L < kDirectRows; }

// scores[r][0..kBk) = q_r . key j for the rows that see the block, keys read
// as rows (no transposed copy: worth it for a few rows only) of float32 or,
// in place, of a 16-bit type converted in registers (exactly: the same sums
// either way). Keys past nk score 0 (their bias hides them).
template <DType D = DType::kFloat32>
void direct_scores(const float* q, int64_t q_row, const Seen* seen, int64_t rows,
                   const typename Elem<D>::Storage* keys, int64_t key_row, int64_t nk, int64_t Dp,
                   float* scores) {
  for (int64_t r = 0; r < rows; ++r) {
    if (seen[r] == Seen::kNone) continue;
    const float* qr = q + r * q_row;
    for (int64_t j0 = 0; j0 < kBk; j0 += kLanes) {
      vec partial[kLanes];
      for (int t = 0; t < kLanes; ++t) {
        vec acc{};
        if (j0 + t < nk) {
          const auto* key = keys + (j0 + t) * key_row;
          for (int64_t e = 0; e < Dp; e += kLanes) acc += vload(qr + e) * Elem<D>::load_vec(key + e);
        }
        partial[t] = acc;
      }
      vstore(scores + r * kBk + j0, sums_of_lanes(partial));
    }
  }
}
void direct_scores(const float* q, int64_t q_row, const Seen* seen, int64_t rows, MatB keys,
                   int64_t nk, int64_t Dp, float* scores) {
  direct_scores(q, q_row, seen, rows, keys.b, keys.row, nk, Dp, scores);
}

// acc[r] += P[r] . values for the rows that see the block (at most
// kDirectRows), values read in place as D and converted in registers, each
// value row once for all rows; Dv a whole number of vectors. The same
// multiply-adds in the same order as the product tile's.
template <DType D, int N>
void direct_values_of(const float* probs, const int64_t* active, const typename Elem<D>::Storage* values,
                      int64_t value_row, int64_t nk, int64_t Dv, float* acc, int64_t Dvp) {
  for (int64_t e = 0; e < Dv; e += kLanes) {
    vec a[N];  // (N fixed: the accumulators stay in registers)
    for (int i = 0; i < N; ++i) a[i] = vload(acc + active[i] * Dvp + e);
    for (int64_t j = 0; j < nk; ++j) {
      const vec v = Elem<D>::load_vec(values + j * value_row + e);
      for (int i = 0; i < N; ++i) a[i] += vsplat(probs[active[i] * kBk + j]) * v;
    }
    for (int i = 0; i < N; ++i) vstore(acc + active[i] * Dvp + e, a[i]);
  }
}
template <DType D>
void direct_values(const float* probs, const Seen* seen, int64_t rows, const typename Elem<D>::Storage* values,
                   int64_t value_row, int64_t nk, int64_t Dv, float* acc, int64_t Dvp) {
  int64_t active[kDirectRows], n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (seen[r] != Seen::kNone) active[n++] = r;
  }
  auto run = [&]<int N>() { direct_values_of<D, N>(probs, active, values, value_row, nk, Dv, acc, Dvp); };
  static_assert(kDirectRows == 8);
  switch (n) {
    case 1: return run.template operator()<1>();
    case 2: return run.template operator()<2>();
    case 3: return run.template operator()<3>();
    case 4: return run.template operator()<4>();
    case 5: return run.template operator()<5>();
    case 6: return run.template operator()<6>();
    case 7: return run.template operator()<7>();
    case 8: return run.template operator()<8>();
  }
}

// A decode step's 16-bit keys and values can be read in place: contiguous
// rows of whole vectors (a partial last vector would read past the row).
inline bool readable_in_place(const View4& x, int64_t width) {
  return x.dtype != DType::kFloat32 && x.strides[3] == 1 && width % kLanes == 0;
}

// f.operator()<D>() for x's 16-bit type D, with x's rows from (b, h, k0) in place.
template <class F>
void with_rows_in_place(const View4& x, int64_t b, int64_t h, int64_t k0, F&& f) {
  const auto* rows = reinterpret_cast<const uint16_t*>(at_element(x, b, h, k0, 0));
  if (x.dtype == DType::kBFloat16) return f.template operator()<DType::kBFloat16>(rows);
  f.template operator()<DType::kFloat16>(rows);
}
