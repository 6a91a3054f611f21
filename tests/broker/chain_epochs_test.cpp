// A chain's roles under the control plane's epochs (chain_e2e_fixture.hpp):
// a lapsed lease stalls acks and reads, a fenced node's suspended replicas
// keep their data until a newer epoch, and a chain rebuilt at a new offset
// generation starts empty there.
#include <chrono>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

// Without a valid lease a chain keeps replicating and committing, but
// nobody is told: acks and deliveries stall (they do not fail), and resume
// with the same offsets once the lease is renewed.
TEST_F(ChainE2E, LapsedLeaseStallsAcksAndReadsUntilRenewed) {
  configure("lease", 0, 1, {0, 1, 2}, 1);
  for (auto& b : brokers_) b->set_lease_deadline(0);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "lease", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  SubscriberOptions so;
  so.provider = provider_spec();
  auto sub = Subscriber::create(routes_, "lease", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::pair<std::uint64_t, std::string>> got;
  auto drain = [&] {
    return sub.value()->poll([&](const Message& m) {
      got.emplace_back(m.offset,
                       std::string(reinterpret_cast<const char*>(m.payload.data()), m.payload.size()));
    });
  };

  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "l", 0, 100, &results);
  ASSERT_TRUE(committed(*brokers_[2], 100, pub.value().get()))
      << "the chain stopped replicating without a lease";
  // The tail committed everything: without the gate the acks and the
  // deliveries would be on their way now. Give them every chance to arrive.
  for (int i = 0; i < 2000; ++i) {
    pub.value()->poll();
    drain();
    std::this_thread::sleep_for(100us);
  }
  EXPECT_TRUE(results.empty()) << results.size() << " record(s) acknowledged without a lease";
  EXPECT_TRUE(got.empty()) << got.size() << " record(s) delivered without a lease";

  for (auto& b : brokers_) b->set_lease_deadline(b->clock().now_ns() + 3'600'000'000'000ull);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 100u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, static_cast<std::uint64_t>(i));
  }
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < 100 && std::chrono::steady_clock::now() < deadline) {
    if (drain() == 0) std::this_thread::sleep_for(100us);
  }
  ASSERT_EQ(got.size(), 100u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, i);
    EXPECT_EQ(got[i].second, "l" + std::to_string(i));
  }
}

// A fenced node suspends its replicas: they keep their data and act on
// nothing until the controller configures them at a newer epoch.
TEST_F(ChainE2E, SuspendedReplicasKeepTheirDataAndActAgainAtANewerEpoch) {
  configure("susp", 0, 1, {0, 1, 2}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "susp", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "s", 0, 50, &results);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 50u);

  for (auto& b : brokers_) b->suspend_all();
  publish_range(*pub.value(), "s", 50, 50, &results);
  ASSERT_TRUE(committed(*brokers_[2], 100));
  for (int i = 0; i < 2000; ++i) {
    pub.value()->poll();
    std::this_thread::sleep_for(100us);
  }
  EXPECT_EQ(results.size(), 50u) << "a suspended head acknowledged";
  for (auto& b : brokers_) {
    auto st = b->stats();
    ASSERT_EQ(st.partitions.size(), 1u);
    EXPECT_EQ(st.partitions[0].replica.end_offset, 100u) << "a suspended replica lost its data";
  }

  configure("susp", 0, 1, {0, 1, 2}, 2);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 100u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, static_cast<std::uint64_t>(i));
  }
}

// A kept copy is resumed only in the same chain: configured into a chain
// rebuilt at a new offset generation, a suspended replica starts empty there
// instead of continuing its old offsets.
TEST_F(ChainE2E, SuspendedCopyIsNotCarriedIntoARebuiltChain) {
  configure("gen", 0, 1, {0}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  {
    auto pub = Publisher::create(routes_, "gen", po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    std::map<int, PublishResult> results;
    publish_range(*pub.value(), "old", 0, 10, &results);
    ASSERT_TRUE(pub.value()->flush(30s));
    ASSERT_EQ(results.size(), 10u);
  }
  brokers_[0]->suspend_all();
  constexpr std::uint64_t kStart = std::uint64_t{1} << 32;
  configure("gen", 0, 1, {0}, 3, 60000, kStart);
  auto pub = Publisher::create(routes_, "gen", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "new", 0, 5, &results);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 5u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, kStart + static_cast<std::uint64_t>(i)) << "the old copy's offsets continued";
  }
}

// A chain the controller rebuilt after its data was lost starts at the
// route's start_offset (a new offset generation, 2^32 here): records are
// acknowledged and delivered from there, never at offsets already used.
TEST_F(ChainE2E, ChainRebuiltAtANewOffsetGenerationContinuesThere) {
  constexpr std::uint64_t kStart = std::uint64_t{1} << 32;
  configure("rebuilt", 0, 1, {0, 1, 2}, 3, 60000, kStart);
  PublisherOptions po;
  po.provider = provider_spec();
  auto pub = Publisher::create(routes_, "rebuilt", po);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  std::map<int, PublishResult> results;
  publish_range(*pub.value(), "g", 0, 20, &results);
  ASSERT_TRUE(pub.value()->flush(30s));
  ASSERT_EQ(results.size(), 20u);
  for (const auto& [i, r] : results) {
    EXPECT_EQ(r.status, PublishStatus::ok) << i;
    EXPECT_EQ(r.offset, kStart + static_cast<std::uint64_t>(i));
  }
  SubscriberOptions so;
  so.provider = provider_spec();
  so.read_from = SubscriberOptions::ReadFrom::tail;
  auto sub = Subscriber::create(routes_, "rebuilt", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::vector<std::uint64_t> offsets;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (offsets.size() < 20 && std::chrono::steady_clock::now() < deadline) {
    if (sub.value()->poll([&](const Message& m) { offsets.push_back(m.offset); }) == 0) {
      std::this_thread::sleep_for(100us);
    }
  }
  ASSERT_EQ(offsets.size(), 20u);
  for (std::size_t i = 0; i < offsets.size(); ++i) EXPECT_EQ(offsets[i], kStart + i);
}

}  // namespace
}  // namespace catena::test
