#include "hgrm.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace catena::bench {
namespace {

// HdrHistogram's layout for lowest discernible value 1 (unit magnitude 0)
// and kHgrmSignificantDigits: sub-buckets of single-unit resolution up to
// 2 x 10^digits, rounded up to a power of two; each further bucket doubles
// the range at half the resolution.
class Layout {
 public:
  Layout() {
    const double unit_resolution = 2.0 * std::pow(10.0, kHgrmSignificantDigits);
    sub_bucket_count_magnitude_ = static_cast<int>(std::ceil(std::log(unit_resolution) / std::log(2.0)));
    sub_bucket_count_ = std::int64_t{1} << sub_bucket_count_magnitude_;
    sub_bucket_half_count_ = sub_bucket_count_ / 2;
    sub_bucket_half_count_magnitude_ = sub_bucket_count_magnitude_ - 1;
    leading_zero_count_base_ = 64 - sub_bucket_count_magnitude_;
    std::int64_t smallest_untrackable = sub_bucket_count_;
    bucket_count_ = 1;
    while (smallest_untrackable <= kHgrmHighestNs) {
      smallest_untrackable <<= 1;
      ++bucket_count_;
    }
  }

  [[nodiscard]] int bucket_count() const { return bucket_count_; }
  [[nodiscard]] std::int64_t sub_bucket_count() const { return sub_bucket_count_; }
  [[nodiscard]] std::size_t counts_length() const {
    return static_cast<std::size_t>((bucket_count_ + 1) * sub_bucket_half_count_);
  }

  [[nodiscard]] int bucket_of(std::int64_t v) const {
    return leading_zero_count_base_ - std::countl_zero(static_cast<std::uint64_t>(v) |
                                                       static_cast<std::uint64_t>(sub_bucket_count_ - 1));
  }
  [[nodiscard]] std::size_t index_of(std::int64_t v) const {
    const int bucket = bucket_of(v);
    const std::int64_t sub = v >> bucket;
    return static_cast<std::size_t>(((std::int64_t{bucket} + 1) << sub_bucket_half_count_magnitude_) +
                                    (sub - sub_bucket_half_count_));
  }
  [[nodiscard]] std::int64_t value_at(std::size_t index) const {
    auto bucket =
        static_cast<int>((static_cast<std::int64_t>(index) >> sub_bucket_half_count_magnitude_) - 1);
    std::int64_t sub =
        (static_cast<std::int64_t>(index) & (sub_bucket_half_count_ - 1)) + sub_bucket_half_count_;
    if (bucket < 0) {
      sub -= sub_bucket_half_count_;
      bucket = 0;
    }
    return sub << bucket;
  }
  [[nodiscard]] std::int64_t lowest_equivalent(std::int64_t v) const {
    const int bucket = bucket_of(v);
    return (v >> bucket) << bucket;
  }
  [[nodiscard]] std::int64_t range_size(std::int64_t v) const { return std::int64_t{1} << bucket_of(v); }
  [[nodiscard]] std::int64_t highest_equivalent(std::int64_t v) const {
    return lowest_equivalent(v) + range_size(v) - 1;
  }
  [[nodiscard]] std::int64_t median_equivalent(std::int64_t v) const {
    return lowest_equivalent(v) + (range_size(v) >> 1);
  }

 private:
  int sub_bucket_count_magnitude_ = 0;
  int sub_bucket_half_count_magnitude_ = 0;
  std::int64_t sub_bucket_count_ = 0;
  std::int64_t sub_bucket_half_count_ = 0;
  int leading_zero_count_base_ = 0;
  int bucket_count_ = 0;
};

// `v` with `decimals` digits after the point, as java.util.Formatter's %f
// prints it (HdrHistogram's reference output is Java's): the shortest
// decimal that reads back as `v`, rounded half up. printf rounds the binary
// value instead, which differs on ties such as 0.9998779296875 at 12 digits.
std::string java_fixed(double v, int decimals) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));
  const bool negative = sci.front() == '-';
  const std::size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(negative ? 1 : 0, e_pos - (negative ? 1 : 0))) {
    if (c != '.') digits += c;
  }
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  // digits d0 d1 d2 ... stand for d0.d1d2... x 10^exponent; the point sits
  // after digit `point` (may be <= 0 or past the end).
  int point = exponent + 1;
  int keep = point + decimals;  // digits kept before rounding
  if (keep < 0) {
    digits.clear();
  } else {
    const bool round_up =
        keep < static_cast<int>(digits.size()) && digits[static_cast<std::size_t>(keep)] >= '5';
    digits.resize(static_cast<std::size_t>(keep), '0');
    if (round_up) {
      int i = keep - 1;
      for (; i >= 0 && digits[static_cast<std::size_t>(i)] == '9'; --i)
        digits[static_cast<std::size_t>(i)] = '0';
      if (i >= 0) {
        ++digits[static_cast<std::size_t>(i)];
      } else {  // carried out of the first digit: 9.9996 -> 10.000
        digits.insert(digits.begin(), '1');
        ++point;
      }
    }
  }
  // `digits`: the kept digits, integer part then decimals.
  std::string int_part, frac_part;
  if (point <= 0) {
    int_part = "0";
    frac_part = std::string(static_cast<std::size_t>(std::min(-point, decimals)), '0') + digits;
  } else {
    int_part = digits.substr(0, static_cast<std::size_t>(point));
    frac_part = digits.size() > static_cast<std::size_t>(point)
                    ? digits.substr(static_cast<std::size_t>(point))
                    : std::string();
  }
  frac_part.resize(static_cast<std::size_t>(decimals), '0');
  const bool zero = int_part.find_first_not_of('0') == std::string::npos &&
                    frac_part.find_first_not_of('0') == std::string::npos;
  std::string out = (negative && !zero) ? "-" : "";
  out += int_part;
  if (decimals > 0) out += "." + frac_part;
  return out;
}

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

}  // namespace

std::string hgrm_text(std::span<const std::uint64_t> samples_ns, int ticks_per_half_distance, double scale) {
  const Layout layout;
  std::vector<std::int64_t> counts(layout.counts_length(), 0);
  std::int64_t total = 0, max_value = 0;
  for (const std::uint64_t s : samples_ns) {
    const auto v = static_cast<std::int64_t>(std::min<std::uint64_t>(s, kHgrmHighestNs));
    ++counts[layout.index_of(v)];
    ++total;
    max_value = std::max(max_value, v);
  }
  const int digits = kHgrmSignificantDigits;
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%12s %14s %10s %14s\n\n", "Value", "Percentile", "TotalCount",
                "1/(1-Percentile)");
  out += line;

  // HdrHistogram's PercentileIterator: walk the counts; at each non-empty
  // index report every tick the cumulative percentile has reached, the
  // tick then moving on by 100 / (ticks x 2^(halvings + 1)) percent; after
  // the last value, one more line at 100%.
  double level = 0;
  bool reached_last = false;
  std::int64_t cumulative = 0;
  std::size_t index = 0;
  bool fresh = true;
  auto emit = [&](std::int64_t value, double percentile_level) {
    const double p = percentile_level / 100.0;
    out += pad(java_fixed(static_cast<double>(value) / scale, digits), 12) + " " + java_fixed(p, 12) + " " +
           pad(std::to_string(cumulative), 10);
    if (percentile_level != 100.0) out += " " + pad(java_fixed(1.0 / (1.0 - p), 2), 14);
    out += "\n";
  };
  while (total > 0) {
    if (cumulative >= total) {  // hasNext(): the extra step to 100%
      if (reached_last) break;
      level = 100.0;
      reached_last = true;
    }
    bool emitted = false;
    while (index < counts.size()) {
      const std::int64_t here = counts[index];
      if (fresh) {
        cumulative += here;
        fresh = false;
      }
      if (here != 0 && 100.0 * static_cast<double>(cumulative) / static_cast<double>(total) >= level) {
        emit(layout.highest_equivalent(layout.value_at(index)), level);
        if (level < 100.0) {
          const auto halvings = static_cast<std::int64_t>(std::log(100.0 / (100.0 - level)) / std::log(2.0));
          const auto ticks = std::int64_t{ticks_per_half_distance} *
                             static_cast<std::int64_t>(std::pow(2.0, static_cast<double>(halvings + 1)));
          level += 100.0 / static_cast<double>(ticks);
        }
        emitted = true;
        break;
      }
      ++index;
      fresh = true;
    }
    if (!emitted) break;
  }

  // Mean and standard deviation over each recorded value's median
  // equivalent, as HdrHistogram's getMean() and getStdDeviation().
  double mean = 0, stddev = 0;
  if (total > 0) {
    double sum = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] == 0) continue;
      const auto m = layout.median_equivalent(layout.highest_equivalent(layout.value_at(i)));
      sum += static_cast<double>(m) * static_cast<double>(counts[i]);
    }
    mean = sum / static_cast<double>(total);
    double dev = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] == 0) continue;
      const double d =
          static_cast<double>(layout.median_equivalent(layout.highest_equivalent(layout.value_at(i)))) - mean;
      dev += d * d * static_cast<double>(counts[i]);
    }
    stddev = std::sqrt(dev / static_cast<double>(total));
  }
  const std::int64_t max_reported = max_value == 0 ? 0 : layout.highest_equivalent(max_value);
  out += "#[Mean    = " + pad(java_fixed(mean / scale, digits), 12) +
         ", StdDeviation   = " + pad(java_fixed(stddev / scale, digits), 12) + "]\n";
  out += "#[Max     = " + pad(java_fixed(static_cast<double>(max_reported) / scale, digits), 12) +
         ", Total count    = " + pad(std::to_string(total), 12) + "]\n";
  out += "#[Buckets = " + pad(std::to_string(layout.bucket_count()), 12) +
         ", SubBuckets     = " + pad(std::to_string(layout.sub_bucket_count()), 12) + "]\n";
  return out;
}

bool parse_hgrm(std::string_view text, std::vector<HgrmPoint>* points, std::string* error) {
  points->clear();
  std::istringstream in{std::string(text)};
  std::string line;
  int n = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line.front() == '#') continue;
    if (!header) {
      std::istringstream h(line);
      std::string a, b, c, d;
      h >> a >> b >> c >> d;
      if (a != "Value" || b != "Percentile" || c != "TotalCount" || d != "1/(1-Percentile)") {
        *error = "line " + std::to_string(n) + ": not the header of a percentile distribution";
        return false;
      }
      header = true;
      continue;
    }
    std::istringstream l(line);
    HgrmPoint p;
    if (!(l >> p.value >> p.percentile >> p.total_count) || p.percentile < 0 || p.percentile > 1) {
      *error = "line " + std::to_string(n) + ": not 'value percentile count [1/(1-percentile)]'";
      return false;
    }
    points->push_back(p);
  }
  if (!header) {
    *error = "no header line (Value Percentile TotalCount 1/(1-Percentile))";
    return false;
  }
  return true;
}

}  // namespace catena::bench
