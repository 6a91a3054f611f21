// Stage tracing end to end (PublisherOptions::trace_stages, NodeStats::
// stage_latency): a chain of three brokers in an order other than their
// indexes; a traced publisher's records are counted once at every position,
// by the broker holding it, with ages that grow down the chain and stay
// within the time the test took; an untraced publisher's records count
// nowhere.
#include <chrono>
#include <gtest/gtest.h>
#include <thread>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

// The summary broker `b` reports for chain position `pos` (count 0: none).
chain::StageLatency::Summary stage_at(const broker::Broker& b, std::uint32_t pos) {
  for (const auto& s : b.stats().stage_latency) {
    if (s.position == pos) return s.latency;
  }
  return {};
}

void publish(Publisher& pub, int records, std::uint64_t* acked) {
  const std::string payload(100, 'p');
  for (int i = 0; i < records; ++i) {
    for (;;) {
      const auto e = pub.publish_to(0, bytes(payload), [acked](const PublishResult& r) {
        if (r.status == PublishStatus::ok) ++*acked;
      });
      if (e == client::ErrorCode::ok) break;
      ASSERT_EQ(e, client::ErrorCode::backpressure);
      pub.poll();
    }
  }
  ASSERT_TRUE(pub.flush(30s));
}

TEST_F(ChainE2E, TracedRecordsAreTimedOnceAtEveryPositionOfTheChain) {
  constexpr int kUntraced = 200;
  constexpr int kTraced = 300;
  const std::vector<int> order{2, 0, 1};  // broker 2 heads, broker 1 is the tail
  configure("traced", 0, 1, order, 1);
  std::uint64_t acked = 0;
  PublisherOptions po;
  po.provider = provider_spec();
  {
    auto plain = Publisher::create(routes_, "traced", po);
    ASSERT_TRUE(plain.ok()) << plain.error().message;
    publish(*plain.value(), kUntraced, &acked);
  }
  po.trace_stages = true;
  auto traced = Publisher::create(routes_, "traced", po);
  ASSERT_TRUE(traced.ok()) << traced.error().message;
  const auto started = std::chrono::steady_clock::now();
  publish(*traced.value(), kTraced, &acked);
  const auto took =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started);
  ASSERT_EQ(acked, static_cast<std::uint64_t>(kUntraced + kTraced));

  // The tail's stats follow its agent's housekeeping: wait for all three.
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (std::size_t pos = 0; pos < order.size(); ++pos)
      all = all && stage_at(*brokers_[order[pos]], static_cast<std::uint32_t>(pos)).count >= kTraced;
    if (all) break;
    std::this_thread::sleep_for(20ms);
  }
  chain::StageLatency::Summary prev;
  for (std::size_t pos = 0; pos < order.size(); ++pos) {
    const auto& b = *brokers_[order[pos]];
    const auto s = stage_at(b, static_cast<std::uint32_t>(pos));
    EXPECT_EQ(s.count, static_cast<std::uint64_t>(kTraced)) << "position " << pos;
    EXPECT_EQ(b.stats().stage_latency.size(), 1u) << "broker " << order[pos] << " holds one position";
    EXPECT_LE(s.p50_ns, s.p99_ns);
    EXPECT_LE(s.p99_ns, s.p999_ns);
    EXPECT_LE(s.p999_ns, s.max_ns);
    EXPECT_GT(s.max_ns, 0u);
    EXPECT_LT(s.max_ns, static_cast<std::uint64_t>(took.count())) << "position " << pos;
    // A record is older further down the chain.
    EXPECT_GE(s.p50_ns, prev.p50_ns) << "position " << pos;
    EXPECT_GE(s.max_ns, prev.max_ns) << "position " << pos;
    prev = s;
  }
}

}  // namespace
}  // namespace catena::test
