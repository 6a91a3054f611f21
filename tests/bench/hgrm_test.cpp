// The .hgrm text `catena bench --out-dir` writes. The expected texts below
// are what HdrHistogram itself (the Java reference, org.HdrHistogram
// .Histogram(1, 3600000000000L, 3), recordValue() of each sample, then
// outputPercentileDistribution(out, 5, 1000.0)) printed for the same
// samples; DEVELOPERS.md, "Benchmarks", says how to print them again.
#include "hgrm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <gtest/gtest.h>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace catena::bench {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Hgrm, TenSamplesPrintAsHdrHistogramPrintsThem) {
  const std::vector<std::uint64_t> ns{1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000};
  EXPECT_EQ(hgrm_text(ns), R"(       Value     Percentile TotalCount 1/(1-Percentile)

       1.000 0.000000000000          1           1.00
       1.000 0.100000000000          1           1.11
       2.000 0.200000000000          2           1.25
       3.001 0.300000000000          3           1.43
       4.001 0.400000000000          4           1.67
       5.003 0.500000000000          5           2.00
       6.003 0.550000000000          6           2.22
       6.003 0.600000000000          6           2.50
       7.003 0.650000000000          7           2.86
       7.003 0.700000000000          7           3.33
       8.003 0.750000000000          8           4.00
       8.003 0.775000000000          8           4.44
       8.003 0.800000000000          8           5.00
       9.007 0.825000000000          9           5.71
       9.007 0.850000000000          9           6.67
       9.007 0.875000000000          9           8.00
       9.007 0.887500000000          9           8.89
       9.007 0.900000000000          9          10.00
      10.007 0.912500000000         10          11.43
      10.007 1.000000000000         10
#[Mean    =        5.502, StdDeviation   =        2.874]
#[Max     =       10.007, Total count    =           10]
#[Buckets =           32, SubBuckets     =         2048]
)");
}

TEST(Hgrm, SamplesAcrossBucketsWithOutliersAndAZeroPrintAsHdrHistogramPrintsThem) {
  // Values past 2048 ns land in coarser buckets (3 significant digits): the
  // Value column is each bucket's highest equivalent value, as HdrHistogram's.
  std::vector<std::uint64_t> ns;
  for (std::uint64_t i = 0; i < 2000; ++i) ns.push_back((i * 7919) % 10007 * 13 + 20000);
  ns.push_back(5'000'000);
  ns.push_back(250'000'000);
  ns.push_back(0);
  EXPECT_EQ(hgrm_text(ns), R"(       Value     Percentile TotalCount 1/(1-Percentile)

       0.000 0.000000000000          1           1.00
      33.023 0.100000000000        201           1.11
      46.015 0.200000000000        402           1.25
      59.039 0.300000000000        601           1.43
      72.191 0.400000000000        803           1.67
      85.183 0.500000000000       1003           2.00
      91.711 0.550000000000       1103           2.22
      98.175 0.600000000000       1203           2.50
     104.703 0.650000000000       1302           2.86
     111.359 0.700000000000       1404           3.33
     117.695 0.750000000000       1503           4.00
     121.087 0.775000000000       1554           4.44
     124.223 0.800000000000       1603           5.00
     127.487 0.825000000000       1653           5.71
     130.815 0.850000000000       1703           6.67
     134.015 0.875000000000       1753           8.00
     135.807 0.887500000000       1779           8.89
     137.343 0.900000000000       1804          10.00
     138.879 0.912500000000       1828          11.43
     140.543 0.925000000000       1853          13.33
     142.207 0.937500000000       1879          16.00
     142.975 0.943750000000       1891          17.78
     143.743 0.950000000000       1903          20.00
     144.639 0.956250000000       1917          22.86
     145.407 0.962500000000       1929          26.67
     146.303 0.968750000000       1942          32.00
     146.687 0.971875000000       1947          35.56
     147.071 0.975000000000       1953          40.00
     147.455 0.978125000000       1960          45.71
     147.839 0.981250000000       1966          53.33
     148.223 0.984375000000       1972          64.00
     148.479 0.985937500000       1976          71.11
     148.607 0.987500000000       1978          80.00
     148.863 0.989062500000       1982          91.43
     149.119 0.990625000000       1986         106.67
     149.247 0.992187500000       1988         128.00
     149.375 0.992968750000       1990         142.22
     149.503 0.993750000000       1992         160.00
     149.631 0.994531250000       1994         182.86
     149.631 0.995312500000       1994         213.33
     149.759 0.996093750000       1996         256.00
     149.759 0.996484375000       1996         284.44
     149.887 0.996875000000       1998         320.00
     149.887 0.997265625000       1998         365.71
     150.015 0.997656250000       2000         426.67
     150.015 0.998046875000       2000         512.00
     150.015 0.998242187500       2000         568.89
     150.015 0.998437500000       2000         640.00
     150.143 0.998632812500       2001         731.43
     150.143 0.998828125000       2001         853.33
    5001.215 0.999023437500       2002        1024.00
    5001.215 0.999121093750       2002        1137.78
    5001.215 0.999218750000       2002        1280.00
    5001.215 0.999316406250       2002        1462.86
    5001.215 0.999414062500       2002        1706.67
  250085.375 0.999511718750       2003        2048.00
  250085.375 1.000000000000       2003
#[Mean    =      212.287, StdDeviation   =     5584.281]
#[Max     =   250085.375, Total count    =         2003]
#[Buckets =           32, SubBuckets     =         2048]
)");
}

TEST(Hgrm, OneSampleAndNone) {
  const std::vector<std::uint64_t> one{12345};
  EXPECT_EQ(hgrm_text(one), R"(       Value     Percentile TotalCount 1/(1-Percentile)

      12.351 0.000000000000          1           1.00
      12.351 1.000000000000          1
#[Mean    =       12.348, StdDeviation   =        0.000]
#[Max     =       12.351, Total count    =            1]
#[Buckets =           32, SubBuckets     =         2048]
)");
  EXPECT_EQ(hgrm_text({}), R"(       Value     Percentile TotalCount 1/(1-Percentile)

#[Mean    =        0.000, StdDeviation   =        0.000]
#[Max     =        0.000, Total count    =            0]
#[Buckets =           32, SubBuckets     =         2048]
)");
}

// The table of a larger distribution, line by line: column widths, the
// 1/(1-Percentile) column, TotalCount = the samples at or below Value, and
// the ticks: 10% steps to 50%, then the step halves each time half of the
// remaining distance to 100% is crossed (5 ticks per half distance).
TEST(Hgrm, EveryLineHoldsItsColumnsCountsAndTicks) {
  std::mt19937_64 gen(17);
  std::vector<std::uint64_t> ns;
  for (int i = 0; i < 100000; ++i) ns.push_back(5000 + gen() % 1000000 * (gen() % 64 == 0 ? 40 : 1));
  std::vector<std::uint64_t> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  const auto lines = lines_of(hgrm_text(ns));
  ASSERT_GE(lines.size(), 8u);
  EXPECT_EQ(lines[0], "       Value     Percentile TotalCount 1/(1-Percentile)");
  EXPECT_EQ(lines[1], "");
  const std::size_t footer = lines.size() - 3;
  double prev_p = -1;
  std::uint64_t prev_count = 0;
  for (std::size_t i = 2; i < footer; ++i) {
    const std::string& l = lines[i];
    const bool last = i + 1 == footer;
    ASSERT_EQ(l.size(), last ? 12u + 1 + 14 + 1 + 10 : 12u + 1 + 14 + 1 + 10 + 1 + 14) << l;
    EXPECT_EQ(l[12], ' ') << l;
    EXPECT_EQ(l.substr(13, 2), last ? "1." : "0.") << l;
    double value = 0, p = 0, inverse = 0;
    unsigned long long count = 0;
    ASSERT_GE(std::sscanf(l.c_str(), "%lf %lf %llu %lf", &value, &p, &count, &inverse), 3) << l;
    // Value: a bucket's highest equivalent value, so exactly the samples at
    // or below it are counted, and within 0.1% of the smallest of them above
    // the previous tick.
    const auto value_ns = static_cast<std::uint64_t>(std::llround(value * 1000));
    const auto at_or_below =
        static_cast<std::uint64_t>(std::upper_bound(sorted.begin(), sorted.end(), value_ns) - sorted.begin());
    EXPECT_EQ(count, at_or_below) << l;
    EXPECT_GE(static_cast<double>(count) / static_cast<double>(sorted.size()), p) << l;
    EXPECT_LE(static_cast<double>(value_ns), static_cast<double>(sorted[count - 1]) * 1.001 + 1) << l;
    EXPECT_GE(count, prev_count) << l;
    if (last) {
      EXPECT_EQ(p, 1.0) << l;
      EXPECT_EQ(count, sorted.size()) << l;
    } else {
      char want[32];
      std::snprintf(want, sizeof want, "%14.2f", 1.0 / (1.0 - p));
      EXPECT_EQ(l.substr(l.size() - 14), want) << l;
      if (prev_p >= 0) {
        const double halvings = std::floor(std::log2(1.0 / (1.0 - prev_p)) + 1e-6);
        EXPECT_NEAR(p - prev_p, 0.1 / std::pow(2.0, halvings), 1e-11) << l;
      } else {
        EXPECT_EQ(p, 0.0) << l;
      }
    }
    prev_p = p;
    prev_count = count;
  }
  char max_line[80];
  std::snprintf(max_line, sizeof max_line, "#[Max     = %12.3f, Total count    = %12zu]",
                static_cast<double>(sorted.back() | 0x7fff) / 1000.0, sorted.size());
  EXPECT_EQ(lines[footer + 1], max_line);
  EXPECT_EQ(lines[footer + 2], "#[Buckets =           32, SubBuckets     =         2048]");
}

TEST(Hgrm, ParsesItsOwnTextBackAndRefusesOtherText) {
  const std::vector<std::uint64_t> ns{1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000};
  std::vector<HgrmPoint> points;
  std::string error;
  ASSERT_TRUE(parse_hgrm(hgrm_text(ns), &points, &error)) << error;
  ASSERT_EQ(points.size(), 20u);
  EXPECT_DOUBLE_EQ(points[5].value, 5.003);
  EXPECT_DOUBLE_EQ(points[5].percentile, 0.5);
  EXPECT_EQ(points[5].total_count, 5u);
  EXPECT_DOUBLE_EQ(points.back().percentile, 1.0);
  EXPECT_EQ(points.back().total_count, 10u);
  EXPECT_FALSE(parse_hgrm("p50 12\n", &points, &error));
  EXPECT_NE(error.find("line 1"), std::string::npos) << error;
  EXPECT_FALSE(parse_hgrm(
      "       Value     Percentile TotalCount 1/(1-Percentile)\n\n       1.000 0.000000000000          x\n",
      &points, &error));
  EXPECT_NE(error.find("line 3"), std::string::npos) << error;
}

}  // namespace
}  // namespace catena::bench
