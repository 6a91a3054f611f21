// A publisher across a channel alter's markers on real chains: a channel of
// two partitions grows to three (each head appends its marker, as the
// controller's alter has them do); the publisher, mapping keys by generation
// 0, is refused at partition 0's marker (remap), switches with its barrier
// (partition 1's records in flight are stored there first) and in band (the
// sessions it had stay; their heads are told the new generation), waits at
// partitions 1 and 2 until their markers are there (partition 1's head holds
// the records back, partition 2's answers its hello not_ready), and sends
// every key's records before the marker to the old partition and after it
// to the new one, in publish order, each stored once. And a shrink: records
// sent with publish_to to the removed partition fail, keys go to the rest.
#include <xxhash.h>

#include <atomic>
#include <gtest/gtest.h>
#include <set>
#include <thread>

#include <catena/broker/client_error.hpp>
#include <catena/broker/controller_routes.hpp>
#include <catena/chain/key_map.hpp>
#include <catena/fabric/thread_annotations.hpp>

#include "../forwarding_routes.hpp"
#include "chain_e2e_fixture.hpp"

namespace catena::test {
namespace {

constexpr int kRemapKeys = 8;

struct Published {
  int key = 0;
  std::vector<PublishResult> results;  // every callback it got (one expected)
};

// Publishes records i in [from, to) with key "key-(i % kRemapKeys)" and payload
// "r<i>", polling while back-pressured (a switch under way says so too).
void publish_keyed(Publisher& pub, int from, int to, std::vector<Published>* out) {
  for (int i = from; i < to; ++i) {
    (*out)[static_cast<std::size_t>(i)].key = i % kRemapKeys;
    const std::string key = "key-" + std::to_string(i % kRemapKeys);
    const std::string payload = "r" + std::to_string(i);
    auto cb = [out, i](const PublishResult& r) { (*out)[static_cast<std::size_t>(i)].results.push_back(r); };
    client::ErrorCode e;
    while ((e = pub.publish(bytes(key), bytes(payload), cb)) == client::ErrorCode::backpressure) pub.poll();
    ASSERT_EQ(e, client::ErrorCode::ok) << i;
  }
}

// Routes from `inner`, except of the partitions cut(): their lookups fail
// as if the controller could not be reached.
class PartitionCutRoutes final : public ForwardingRoutes {
 public:
  using ForwardingRoutes::ForwardingRoutes;
  void cut(std::set<std::uint32_t> partitions) {
    MutexLock lk(mu_);
    cut_ = std::move(partitions);
  }
  std::uint64_t refused() const { return refused_.load(); }

  client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                              std::uint64_t known_epoch) override {
    {
      MutexLock lk(mu_);
      if (cut_.contains(partition)) {
        ++refused_;
        return client::make_error(client::ErrorCode::controller_unavailable, "cut off by the test");
      }
    }
    return ForwardingRoutes::route(channel, partition, known_epoch);
  }

 private:
  Mutex mu_;
  std::set<std::uint32_t> cut_ GUARDED_BY(mu_);
  std::atomic<std::uint64_t> refused_{0};
};

// A publisher starts with the last complete generation: an open one is
// not the mapping until its markers are in.
TEST(PublisherLayout, ControllerRoutesMapByTheLastCompleteGeneration) {
  control::idl::ChannelInfo info;
  info.config.partitions = 4;
  info.config.segment_bytes = 1 << 20;
  EXPECT_EQ(broker::ControllerRoutes::to_layout(info).generation, 0u) << "never altered";
  for (int g = 1; g <= 3; ++g) {
    control::idl::ChannelGeneration gen;
    gen.generation = g;
    gen.partitions = g == 3 ? 8 : 4;
    gen.complete = g < 3;
    info.generations.push_back(gen);
  }
  const ChannelLayout l = broker::ControllerRoutes::to_layout(info);
  EXPECT_EQ(l.generation, 2u);
  EXPECT_EQ(l.partitions, 4u);
  EXPECT_EQ(l.segment_bytes, 1u << 20);
}

TEST_F(ChainE2E, PublisherSwitchesToTheNewKeyMappingExactlyAtTheMarkers) {
  // Generation 0 has two partitions, generation 1 three; partition 2 is
  // served already (the alter placed it) and the layout is still
  // generation 0's.
  configure("rk", 2, 2, {2, 0}, 1);
  configure("rk", 1, 2, {1, 2}, 1);
  configure("rk", 0, 2, {0, 1}, 1);
  std::uint32_t old_partition[kRemapKeys];
  std::uint32_t new_partition[kRemapKeys];
  std::set<std::uint32_t> moves;
  for (int k = 0; k < kRemapKeys; ++k) {
    const std::string key = "key-" + std::to_string(k);
    const std::uint64_t h = XXH64(key.data(), key.size(), 0);
    old_partition[k] = chain::partition_of_hash(h, 2);
    new_partition[k] = chain::partition_of_hash(h, 3);
    moves.insert(new_partition[k]);
  }
  ASSERT_EQ(moves.size(), 3u) << "the keys must cover every partition of generation 1";

  PublisherOptions po;
  po.provider = provider_spec();
  PartitionCutRoutes routes(routes_);
  auto created = Publisher::create(routes, "rk", po);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& pub = *created.value();
  ASSERT_EQ(pub.partitions(), 2u);

  constexpr int kTotal = 1200;
  std::vector<Published> sent(kTotal);
  publish_keyed(pub, 0, 300, &sent);
  ASSERT_TRUE(pub.flush(20s));
  // The switch keeps the sessions of partitions 0 and 1: it tells their
  // heads the new generation in band, with no new hello and no controller
  // call. Only the added partition 2 needs its route.
  routes.cut({0, 1});
  auto sessions_opened = [&](std::size_t broker) {
    for (const auto& p : brokers_[broker]->stats().partitions) {
      if (p.channel == "rk" && p.partition == broker) return p.replica.publisher_sessions_opened;
    }
    return std::uint64_t{0};
  };
  // The sessions open with each partition's first record (rings by need),
  // and stats() is a snapshot the data-plane thread refreshes every few ms.
  for (int i = 0; i < 400 && (sessions_opened(0) == 0 || sessions_opened(1) == 0); ++i)
    std::this_thread::sleep_for(5ms);
  const std::uint64_t opened_before[2] = {sessions_opened(0), sessions_opened(1)};
  ASSERT_EQ(opened_before[0], 1u);
  ASSERT_EQ(opened_before[1], 1u);
  // More in flight to both partitions while partition 0's head appends its
  // marker. Partition 1's records still in flight when partition 0 refuses
  // are stored there (no marker yet): the switch waits for their answers.
  publish_keyed(pub, 300, 600, &sent);
  const chain::MarkerSpec spec{1, 2, 3};
  const auto m0 = brokers_[0]->append_marker("rk", 0, 1, spec);
  ASSERT_EQ(m0.status, broker::ConfigureStatus::applied) << m0.message;
  // Refused at partition 0 from here; partitions 1 and 2 have no marker
  // yet, so records for them wait (not_ready) and none lands before it.
  publish_keyed(pub, 600, 900, &sent);
  const auto until = std::chrono::steady_clock::now() + 200ms;
  while (std::chrono::steady_clock::now() < until) pub.poll();
  EXPECT_EQ(pub.partitions(), 3u) << "the remap answer said generation 1 has three partitions";
  const auto m1 = brokers_[1]->append_marker("rk", 1, 1, spec);
  ASSERT_EQ(m1.status, broker::ConfigureStatus::applied) << m1.message;
  const auto m2 = brokers_[2]->append_marker("rk", 2, 1, spec);
  ASSERT_EQ(m2.status, broker::ConfigureStatus::applied) << m2.message;
  EXPECT_EQ(m2.state.offset, 0u) << "nothing of generation 1 before the marker of the added partition";
  publish_keyed(pub, 900, kTotal, &sent);
  ASSERT_TRUE(pub.flush(30s));
  ASSERT_EQ(pub.partitions(), 3u);
  EXPECT_EQ(sessions_opened(0), opened_before[0]) << "partition 0 switched in band";
  EXPECT_EQ(sessions_opened(1), opened_before[1]) << "partition 1 switched in band";
  EXPECT_EQ(routes.refused(), 0u) << "no route lookup for the partitions the publisher had";
  const std::uint64_t marker_at[3] = {m0.state.offset, m1.state.offset, m2.state.offset};

  // Every record acknowledged once; per key, its old partition below that
  // one's marker, then its new partition above that one's marker, offsets
  // rising in publish order.
  std::map<std::pair<std::uint32_t, std::uint64_t>, int> stored;  // (partition, offset) -> record
  int before = 0;
  int after = 0;
  for (int k = 0; k < kRemapKeys; ++k) {
    bool switched = false;
    std::uint64_t last[3] = {0, 0, 0};
    bool any[3] = {false, false, false};
    for (int i = k; i < kTotal; i += kRemapKeys) {
      const Published& p = sent[static_cast<std::size_t>(i)];
      ASSERT_EQ(p.results.size(), 1u) << "record " << i;
      const PublishResult& r = p.results[0];
      ASSERT_EQ(r.status, PublishStatus::ok) << "record " << i << ": " << client::to_string(r.status);
      ASSERT_LT(r.partition, 3u);
      EXPECT_TRUE(stored.emplace(std::make_pair(r.partition, r.offset), i).second) << "record " << i;
      const bool in_new = r.partition == new_partition[k] && r.offset > marker_at[r.partition];
      if (!in_new) {
        EXPECT_FALSE(switched) << "key " << k << ": record " << i << " in the old mapping after the switch";
        EXPECT_EQ(r.partition, old_partition[k]) << "record " << i;
        EXPECT_LT(r.offset, marker_at[r.partition]) << "record " << i;
        ++before;
      } else {
        switched = true;
        ++after;
      }
      if (any[r.partition]) {
        EXPECT_GT(r.offset, last[r.partition]) << "key " << k << " record " << i;
      }
      any[r.partition] = true;
      last[r.partition] = r.offset;
    }
    EXPECT_TRUE(switched) << "key " << k;
  }
  EXPECT_GE(before, 300);
  EXPECT_GE(after, 300);

  // What the partitions hold: each record once, where its ack said, and the
  // three markers.
  auto p2 = routes_.route("rk", 2, 0);
  ASSERT_TRUE(p2.ok());
  routes_.set(p2.value(), 3, kSegment);
  SubscriberOptions so;
  so.provider = provider_spec();
  so.control_records = true;
  auto sub = Subscriber::create(routes_, "rk", so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::size_t records = 0;
  std::size_t markers = 0;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (records + markers < kTotal + 3 && std::chrono::steady_clock::now() < deadline) {
    sub.value()->poll([&](const Message& m) {
      if (m.marker) {
        ++markers;
        EXPECT_EQ(m.offset, marker_at[m.partition]);
        EXPECT_EQ(m.sequence, 1u);
        return;
      }
      ++records;
      const std::string payload(reinterpret_cast<const char*>(m.payload.data()), m.payload.size());
      auto it = stored.find({m.partition, m.offset});
      ASSERT_NE(it, stored.end()) << "partition " << m.partition << " offset " << m.offset << ": " << payload;
      EXPECT_EQ(payload, "r" + std::to_string(it->second));
    });
  }
  EXPECT_EQ(records, static_cast<std::size_t>(kTotal)) << "nothing stored twice or lost";
  EXPECT_EQ(markers, 3u);
}

TEST_F(ChainE2E, AfterAShrinkPublishToARemovedPartitionFailsAndKeysGoToTheRest) {
  configure("sh", 1, 2, {1, 2}, 1);
  configure("sh", 0, 2, {0, 1}, 1);
  PublisherOptions po;
  po.provider = provider_spec();
  auto created = Publisher::create(routes_, "sh", po);
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& pub = *created.value();
  ASSERT_EQ(pub.partitions(), 2u);
  // Generation 1 has one partition: both heads append its marker.
  const chain::MarkerSpec spec{1, 2, 1};
  const auto m0 = brokers_[0]->append_marker("sh", 0, 1, spec);
  ASSERT_EQ(m0.status, broker::ConfigureStatus::applied) << m0.message;
  const auto m1 = brokers_[1]->append_marker("sh", 1, 1, spec);
  ASSERT_EQ(m1.status, broker::ConfigureStatus::applied) << m1.message;

  std::vector<PublishResult> to_removed;
  std::vector<PublishResult> to_kept;
  std::map<int, std::vector<PublishResult>> keyed;
  ASSERT_EQ(
      pub.publish_to(1, bytes(std::string("gone")), [&](const PublishResult& r) { to_removed.push_back(r); }),
      client::ErrorCode::ok);
  for (int k = 0; k < kRemapKeys; ++k) {
    const std::string key = "key-" + std::to_string(k);
    client::ErrorCode e;
    while ((e = pub.publish(bytes(key), bytes("v" + std::to_string(k)), [&keyed, k](const PublishResult& r) {
             keyed[k].push_back(r);
           })) == client::ErrorCode::backpressure) {
      pub.poll();
    }
    ASSERT_EQ(e, client::ErrorCode::ok);
  }
  client::ErrorCode e;
  while ((e = pub.publish_to(0, bytes(std::string("kept")), [&](const PublishResult& r) {
           to_kept.push_back(r);
         })) == client::ErrorCode::backpressure) {
    pub.poll();
  }
  ASSERT_EQ(e, client::ErrorCode::ok);
  ASSERT_TRUE(pub.flush(20s));
  EXPECT_EQ(pub.partitions(), 1u);
  ASSERT_EQ(to_removed.size(), 1u);
  EXPECT_EQ(to_removed[0].status, PublishStatus::invalid_argument) << client::to_string(to_removed[0].status);
  EXPECT_EQ(to_removed[0].status, client::ErrorCode::invalid_argument);
  std::uint64_t last = m0.state.offset;
  for (int k = 0; k < kRemapKeys; ++k) {
    ASSERT_EQ(keyed[k].size(), 1u) << "key " << k;
    EXPECT_EQ(keyed[k][0].status, PublishStatus::ok) << "key " << k;
    EXPECT_EQ(keyed[k][0].partition, 0u) << "key " << k;
    EXPECT_GT(keyed[k][0].offset, last) << "key " << k << ": above the marker, in publish order";
    last = keyed[k][0].offset;
  }
  ASSERT_EQ(to_kept.size(), 1u);
  EXPECT_EQ(to_kept[0].status, PublishStatus::ok);
  EXPECT_GT(to_kept[0].offset, last);
  EXPECT_EQ(pub.publish_to(1, bytes(std::string("late")), [](const PublishResult&) {}),
            client::ErrorCode::invalid_argument);
}

}  // namespace
}  // namespace catena::test
