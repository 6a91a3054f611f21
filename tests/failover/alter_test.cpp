// A channel alter with real processes: `catena channel alter` (the
// controller's alter_channel) grows a channel from 2 to 3 partitions while a
// publisher, routed by the controller, publishes keyed records. The heads
// append their markers; the publisher is refused at them (remap), switches,
// and every key's records lie below its old partition's marker, then above
// its new partition's marker, in publish order, each acknowledged once.
#include <xxhash.h>

#include <chrono>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <vector>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/chain/key_map.hpp>
#include <catena/control/controller_client.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;
using test::bytes;

constexpr int kAlterKeys = 12;

TEST(Alter, PublisherFollowsAGrowthAtTheMarkersKeepingEachKeysOrder) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = "failover-alter";
  o.quiet = true;
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  control::ControllerClient::Options co;
  co.address = cluster.controller_address();
  control::ControllerClient admin(co);
  control::idl::ChannelConfig cfg;
  cfg.name = "grow";
  cfg.partitions = 2;
  cfg.replication = 2;
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  ASSERT_TRUE(admin.create_channel(cfg).ok());

  broker::ControllerRoutes routes(co, "alter");
  auto created = Publisher::create(routes, "grow");
  ASSERT_TRUE(created.ok()) << created.error().message;
  Publisher& pub = *created.value();
  ASSERT_EQ(pub.partitions(), 2u);

  constexpr int kTotal = 900;
  std::vector<std::vector<PublishResult>> results(kTotal);
  auto publish = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      const std::string key = "key-" + std::to_string(i % kAlterKeys);
      const std::string payload = "r" + std::to_string(i);
      client::ErrorCode e;
      while ((e = pub.publish(bytes(key), bytes(payload), [&results, i](const PublishResult& r) {
               results[static_cast<std::size_t>(i)].push_back(r);
             })) == client::ErrorCode::backpressure) {
        pub.poll();
      }
      ASSERT_EQ(e, client::ErrorCode::ok) << i;
    }
  };
  publish(0, 300);
  ASSERT_TRUE(pub.flush(30s));
  publish(300, 450);  // in flight while the controller alters the channel
  auto altered = admin.alter_channel("grow", 3);
  ASSERT_TRUE(altered.ok()) << altered.error().describe();
  ASSERT_FALSE(altered->generations.empty());
  const auto& gen = altered->generations.back();
  ASSERT_TRUE(gen.complete);
  ASSERT_EQ(gen.partitions, 3);
  std::map<std::uint32_t, std::uint64_t> marker_at;
  for (const auto& [p, off] : gen.markers) {
    ASSERT_GE(off, 0) << "partition " << p;
    marker_at[static_cast<std::uint32_t>(p)] = static_cast<std::uint64_t>(off);
  }
  ASSERT_EQ(marker_at.size(), 3u);
  publish(450, kTotal);
  ASSERT_TRUE(pub.flush(30s));
  EXPECT_EQ(pub.partitions(), 3u);

  int after = 0;
  std::map<std::pair<std::uint32_t, std::uint64_t>, int> stored;
  for (int k = 0; k < kAlterKeys; ++k) {
    const std::string key = "key-" + std::to_string(k);
    const std::uint64_t h = XXH64(key.data(), key.size(), 0);
    const std::uint32_t old_p = chain::partition_of_hash(h, 2);
    const std::uint32_t new_p = chain::partition_of_hash(h, 3);
    bool switched = false;
    std::map<std::uint32_t, std::uint64_t> last;
    for (int i = k; i < kTotal; i += kAlterKeys) {
      const auto& rs = results[static_cast<std::size_t>(i)];
      ASSERT_EQ(rs.size(), 1u) << "record " << i;
      const PublishResult& r = rs[0];
      ASSERT_EQ(r.status, PublishStatus::ok) << "record " << i << ": " << client::to_string(r.status);
      EXPECT_TRUE(stored.emplace(std::make_pair(r.partition, r.offset), i).second) << "record " << i;
      const bool in_new = r.partition == new_p && r.offset > marker_at[r.partition];
      if (in_new) {
        switched = true;
        ++after;
      } else {
        EXPECT_FALSE(switched) << "key " << k << ": record " << i << " in the old mapping after the switch";
        EXPECT_EQ(r.partition, old_p) << "record " << i;
        EXPECT_LT(r.offset, marker_at[r.partition]) << "record " << i;
      }
      auto it = last.find(r.partition);
      if (it != last.end()) {
        EXPECT_GT(r.offset, it->second) << "key " << k << " record " << i;
      }
      last[r.partition] = r.offset;
    }
    EXPECT_TRUE(switched) << "key " << k;
  }
  EXPECT_GE(after, kTotal - 450);
}

}  // namespace
}  // namespace catena
