// A channel alter's marker on a real chain (Broker::append_marker, what the
// controller's appendMarker reaches): it takes the next offset at the head,
// commits like a record, is idempotent per generation (also at a replica
// promoted to head after it validated the marker), and reaches subscribers
// only when they ask for control records.
#include <gtest/gtest.h>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

// Asks the head until the marker is committed; returns its offset.
std::uint64_t committed_marker(broker::Broker& head, std::uint64_t epoch, std::uint64_t generation) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    auto r = head.append_marker("alt", 0, epoch, chain::MarkerSpec{generation, 1, 2});
    EXPECT_EQ(r.status, broker::ConfigureStatus::applied) << r.message;
    if (r.status != broker::ConfigureStatus::applied) return ~0ull;
    if (r.state.commit_offset > r.state.offset || std::chrono::steady_clock::now() > deadline)
      return r.state.offset;
    std::this_thread::sleep_for(1ms);
  }
}

// Every message of partition 0 until `count` arrived.
std::vector<Message> read_messages(StaticRoutes& routes, bool control_records, std::size_t count) {
  SubscriberOptions so;
  so.provider = provider_spec();
  so.control_records = control_records;
  auto sub = Subscriber::create(routes, "alt", so);
  EXPECT_TRUE(sub.ok());
  std::vector<Message> got;
  if (!sub.ok()) return got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < count && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      got.push_back(m);
      got.back().payload = {};  // valid during the handler only
    });
  }
  return got;
}

TEST_F(ChainE2E, MarkerIsAnIdempotentCommittedControlRecord) {
  configure("alt", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "alt", po);
  ASSERT_TRUE(pub.ok());
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "a", 0, 100, &results);
  ASSERT_TRUE(pub.value()->flush(20s));

  // Only the head at its epoch appends one.
  EXPECT_EQ(brokers_[1]->append_marker("alt", 0, 1, chain::MarkerSpec{1, 1, 2}).status,
            broker::ConfigureStatus::invalid);
  EXPECT_EQ(brokers_[0]->append_marker("alt", 0, 2, chain::MarkerSpec{1, 1, 2}).status,
            broker::ConfigureStatus::stale_epoch);
  EXPECT_EQ(brokers_[0]->append_marker("other", 0, 1, chain::MarkerSpec{1, 1, 2}).status,
            broker::ConfigureStatus::invalid);
  EXPECT_EQ(committed_marker(*brokers_[0], 1, 1), 100u);
  EXPECT_EQ(committed_marker(*brokers_[0], 1, 1), 100u);  // asked again: the same one

  publish_range(*pub.value(), "b", 100, 100, &results);
  ASSERT_TRUE(pub.value()->flush(20s));
  for (int i = 100; i < 200; ++i) EXPECT_EQ(results[i].offset, static_cast<std::uint64_t>(i + 1)) << i;

  const auto plain = read_messages(routes_, false, 200);
  ASSERT_EQ(plain.size(), 200u);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_FALSE(plain[i].marker);
    EXPECT_EQ(plain[i].offset, i < 100 ? i : i + 1);
  }
  const auto all = read_messages(routes_, true, 201);
  ASSERT_EQ(all.size(), 201u);
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].offset, i);
    EXPECT_EQ(all[i].marker, i == 100) << i;
  }
  EXPECT_EQ(all[100].sequence, 1u);  // the generation it brings in
  EXPECT_EQ(all[100].producer_id, 0u);

  // The head fails over to the middle: it validated the marker, so the same
  // request finds it instead of appending a second one; a newer generation
  // gets a new marker.
  configure("alt", 0, 1, {1, 2}, 2);
  EXPECT_EQ(committed_marker(*brokers_[1], 2, 1), 100u);
  EXPECT_EQ(committed_marker(*brokers_[1], 2, 2), 201u);
}

}  // namespace
}  // namespace catena::test
