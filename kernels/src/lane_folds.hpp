// Lane sums of a whole register's worth of vectors at once, at one
// instruction-set level. Included by kernel body files *inside* their ISA
// region and namespace, after the includer has defined kLanes, veci and
// vecf (element_vectors.hpp); it includes nothing itself.

// Sums across lanes of kLanes vectors at once: lane t of the result is the
// sum of a[t]'s lanes. Each level folds pairs of vectors with two shuffles and
// one add, so the whole costs about 3 instructions per input vector, against
// a chain of log2(kLanes) dependent steps for each vector summed on its own.
//
// At level g, every vector holds g keys' partial sums, key k of the g in the
// lanes congruent to k mod g. Folding x and y gives 2g keys (x's, then y's):
// lane t (k = t % 2g) adds the two lanes of its source that hold key k.
constexpr int fold_lane(int t, int g, bool second) {
  const int base = t / (2 * g) * 2 * g, k = t % (2 * g);
  const int from = k < g ? base + k : kLanes + base + k - g;  // x's lanes, then y's
  return second ? from + g : from;
}
template <int G, bool kSecond, int... T>
constexpr veci fold_mask(std::integer_sequence<int, T...>) {
  return veci{fold_lane(T, G, kSecond)...};
}
template <int G>
inline void fold_level(vecf* a) {
  constexpr auto lanes = std::make_integer_sequence<int, kLanes>{};
  constexpr veci first = fold_mask<G, false>(lanes), second = fold_mask<G, true>(lanes);
  for (int i = 0; i < kLanes / (2 * G); ++i) {
    a[i] = __builtin_shuffle(a[2 * i], a[2 * i + 1], first) +
           __builtin_shuffle(a[2 * i], a[2 * i + 1], second);
  }
  if constexpr (2 * G < kLanes) fold_level<2 * G>(a);
}
// a[0..kLanes) is overwritten.
inline vecf sums_of_lanes(vecf* a) {
  fold_level<1>(a);
  return a[0];
}
