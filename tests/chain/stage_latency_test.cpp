// StageLatency: the per-position histograms traced records fill
// (stage_latency.hpp): percentiles within a bucket (6%) of the exact ones,
// the maximum exact, positions past the last counted as the last.
#include <gtest/gtest.h>

#include <catena/chain/stage_latency.hpp>

namespace catena::chain {
namespace {

TEST(StageLatency, PercentilesAreWithinABucketOfTheExactOnes) {
  StageLatency s;
  // 1..100000 ns, each once: p50 50000, p99 99000, p99.9 99900.
  for (std::uint64_t v = 1; v <= 100'000; ++v) s.record(1, v);
  const auto sum = s.summary(1);
  EXPECT_EQ(sum.count, 100'000u);
  EXPECT_EQ(sum.max_ns, 100'000u);
  auto near = [](std::uint64_t got, double want) {
    return static_cast<double>(got) >= want && static_cast<double>(got) <= want * 1.0625 + 1;
  };
  EXPECT_TRUE(near(sum.p50_ns, 50'000)) << sum.p50_ns;
  EXPECT_TRUE(near(sum.p99_ns, 99'000)) << sum.p99_ns;
  EXPECT_TRUE(near(sum.p999_ns, 99'900)) << sum.p999_ns;
  EXPECT_LE(sum.p999_ns, sum.max_ns);
  // Other positions saw nothing.
  EXPECT_EQ(s.summary(0).count, 0u);
  EXPECT_EQ(s.summary(0).p99_ns, 0u);
}

TEST(StageLatency, SmallValuesAreExactAndATailShowsInTheHighPercentiles) {
  StageLatency s;
  for (int i = 0; i < 990; ++i) s.record(0, 7);
  for (int i = 0; i < 10; ++i) s.record(0, 5'000'000);  // 1%: 5 ms
  const auto sum = s.summary(0);
  EXPECT_EQ(sum.p50_ns, 7u);
  EXPECT_EQ(sum.p99_ns, 7u);  // rank 990 of 1000 is still the body
  EXPECT_GE(sum.p999_ns, 5'000'000u);
  EXPECT_LE(sum.p999_ns, 5'000'000u);  // never above the maximum
  EXPECT_EQ(sum.max_ns, 5'000'000u);
}

TEST(StageLatency, PositionsPastTheLastCountAsTheLast) {
  StageLatency s;
  s.record(StageLatency::kPositions + 5, 1000);
  s.record(StageLatency::kPositions - 1, 3000);
  EXPECT_EQ(s.summary(StageLatency::kPositions - 1).count, 2u);
  EXPECT_EQ(s.summary(StageLatency::kPositions + 5).max_ns, 3000u);
  // The largest value a histogram can hold, and more, are counted, not lost.
  s.record(2, ~0ull);
  EXPECT_EQ(s.summary(2).count, 1u);
  EXPECT_EQ(s.summary(2).max_ns, ~0ull);
  EXPECT_EQ(s.summary(2).p50_ns, ~0ull);
}

}  // namespace
}  // namespace catena::chain
