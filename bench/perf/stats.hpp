// Latency samples -> percentiles, shared by the perf tools.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace catena::bench {

struct Percentiles {
  std::uint64_t p50 = 0, p99 = 0, p999 = 0, max = 0;
  std::size_t count = 0;
};

inline Percentiles percentiles(std::vector<std::uint64_t> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return v[std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5))];
  };
  p.p50 = at(0.50);
  p.p99 = at(0.99);
  p.p999 = at(0.999);
  p.max = v.back();
  p.count = v.size();
  return p;
}

}  // namespace catena::bench
