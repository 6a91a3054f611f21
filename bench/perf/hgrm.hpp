// Latency samples -> HdrHistogram's percentile distribution text (.hgrm),
// and that text read back, for `catena bench --out-dir` and its plot.
//
// Debian packages HdrHistogram for Java and Go only, not for C or C++, so
// the histogram is laid out here exactly as Gil Tene's HdrHistogram lays it
// out (lowest discernible value 1, highest trackable kHgrmHighestNs, 3
// significant digits: the same buckets, sub-buckets and equivalent-value
// ranges), and hgrm_text() prints what its
// outputPercentileDistribution(out, 5, 1000.0) prints for the same recorded
// values: nanoseconds recorded, microseconds shown.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace catena::bench {

inline constexpr std::int64_t kHgrmHighestNs = 3'600'000'000'000;  // one hour; longer samples are clamped
inline constexpr int kHgrmSignificantDigits = 3;
inline constexpr int kHgrmTicksPerHalfDistance = 5;
inline constexpr double kHgrmScaleNsToUs = 1000.0;

// The .hgrm text of `samples_ns` (any order): the header line
//   "       Value     Percentile TotalCount 1/(1-Percentile)", a blank line,
// one line per percentile tick (ticks_per_half_distance ticks in each half
// of the remaining distance to 100%), the 100% line, and the footer
// (#[Mean ...], #[Max ...], #[Buckets ...]). Values are divided by
// `scale` (1000: ns recorded, us printed). No samples: the header and a
// footer of zeros, as HdrHistogram prints an empty histogram.
std::string hgrm_text(std::span<const std::uint64_t> samples_ns,
                      int ticks_per_half_distance = kHgrmTicksPerHalfDistance,
                      double scale = kHgrmScaleNsToUs);

// One line of the distribution as read back from .hgrm text.
struct HgrmPoint {
  double value = 0;       // in the file's unit (us for catena bench's files)
  double percentile = 0;  // 0..1
  std::uint64_t total_count = 0;
};

// The table lines of .hgrm text, in order; false (and `error` says which
// line) if the text is not a percentile distribution.
bool parse_hgrm(std::string_view text, std::vector<HgrmPoint>* points, std::string* error);

}  // namespace catena::bench
