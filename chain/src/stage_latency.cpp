#include <algorithm>
#include <bit>

#include <catena/chain/stage_latency.hpp>

namespace catena::chain {

std::uint32_t StageLatency::bucket_of(std::uint64_t v) noexcept {
  if (v < kSub) return static_cast<std::uint32_t>(v);
  const auto top = static_cast<std::uint32_t>(std::bit_width(v) - 1);  // >= 4
  const auto sub = static_cast<std::uint32_t>((v >> (top - 4)) & (kSub - 1));
  return (top - 3) * kSub + sub;
}

std::uint64_t StageLatency::upper_edge(std::uint32_t b) noexcept {
  if (b < kSub) return b;
  const std::uint32_t top = b / kSub + 3;
  const std::uint64_t sub = b % kSub;
  // Values in this bucket are [(16 + sub) << (top - 4), (17 + sub) << (top - 4)).
  return ((kSub + sub + 1) << (top - 4)) - 1;
}

void StageLatency::record(std::uint32_t position, std::uint64_t latency_ns) noexcept {
  Histogram& h = positions_[std::min(position, kPositions - 1)];
  ++h.counts[std::min(bucket_of(latency_ns), kBuckets - 1)];
  ++h.count;
  h.max = std::max(h.max, latency_ns);
}

StageLatency::Summary StageLatency::summary(std::uint32_t position) const noexcept {
  const Histogram& h = positions_[std::min(position, kPositions - 1)];
  Summary s;
  s.count = h.count;
  s.max_ns = h.max;
  if (h.count == 0) return s;
  // The smallest bucket edge with at least that share of the samples at or
  // below it (rank ceil(q * count)), never above the maximum seen.
  auto at = [&](std::uint64_t per_mille_of_mille) {
    const std::uint64_t rank =
        std::max<std::uint64_t>(1, (h.count * per_mille_of_mille + 999'999) / 1'000'000);
    std::uint64_t seen = 0;
    for (std::uint32_t b = 0; b < kBuckets; ++b) {
      seen += h.counts[b];
      if (seen >= rank) return std::min(upper_edge(b), h.max);
    }
    return h.max;
  };
  s.p50_ns = at(500'000);
  s.p99_ns = at(990'000);
  s.p999_ns = at(999'000);
  return s;
}

}  // namespace catena::chain
