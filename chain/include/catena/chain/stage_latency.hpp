// Where a record's time goes between its publish and each replica of its
// chain: for records a publisher traces (kFlagTrace, PublisherOptions::
// trace_stages), each replica adds "now - the record's timestamp" (the
// publisher's wall clock, so meaningful on one host or with synchronised
// clocks) to the histogram of its position in the chain, as the record
// becomes visible there: appended at the head (position 0), received from
// the predecessor further down. The percentiles of position k against
// those of k-1 say which hop the tail comes from.
//
// One per node, shared by its replicas. Data-plane thread only: a record is
// two shifts and an increment, no allocation, no lock, no system call.
#pragma once

#include <array>
#include <cstdint>

namespace catena::chain {

class StageLatency {
 public:
  // Positions 0..kPositions-1 (a replica further down counts as the last).
  static constexpr std::uint32_t kPositions = 8;

  struct Summary {
    std::uint64_t count = 0;
    std::uint64_t p50_ns = 0;
    std::uint64_t p99_ns = 0;
    std::uint64_t p999_ns = 0;
    std::uint64_t max_ns = 0;
  };

  void record(std::uint32_t position, std::uint64_t latency_ns) noexcept;
  // Each percentile is the upper edge of its bucket: within 1/16 (6%).
  [[nodiscard]] Summary summary(std::uint32_t position) const noexcept;

 private:
  // Log-linear buckets: 16 per power of two (the value's top 4 bits below
  // its highest), exact below 16 ns.
  static constexpr std::uint32_t kSub = 16;
  static constexpr std::uint32_t kBuckets = 64 * kSub;
  [[nodiscard]] static std::uint32_t bucket_of(std::uint64_t v) noexcept;
  [[nodiscard]] static std::uint64_t upper_edge(std::uint32_t b) noexcept;

  struct Histogram {
    std::array<std::uint64_t, kBuckets> counts{};
    std::uint64_t count = 0;
    std::uint64_t max = 0;
  };
  std::array<Histogram, kPositions> positions_{};
};

}  // namespace catena::chain
