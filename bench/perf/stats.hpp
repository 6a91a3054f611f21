// Samples -> percentiles: the one definition of a percentile (nearest rank)
// for catena-perf and every `catena bench`/`cluster demo` figure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace catena::bench {

struct Percentiles {
  std::uint64_t p50 = 0, p99 = 0, p999 = 0, max = 0;
  std::size_t count = 0;
};

// The q-quantile (q in [0, 1]) of samples sorted ascending, by nearest rank;
// T{} if there are none.
template <class T>
T quantile_sorted(const std::vector<T>& sorted, double q) {
  if (sorted.empty()) return T{};
  const auto rank = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(sorted.size() - 1, rank)];
}

template <class T>
T quantile(std::vector<T> samples, double q) {
  std::sort(samples.begin(), samples.end());
  return quantile_sorted(samples, q);
}

inline Percentiles percentiles(std::vector<std::uint64_t> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = quantile_sorted(v, 0.50);
  p.p99 = quantile_sorted(v, 0.99);
  p.p999 = quantile_sorted(v, 0.999);
  p.max = v.back();
  p.count = v.size();
  return p;
}

}  // namespace catena::bench
