// The limits of chain/limits.hpp end to end, with real processes: catenad
// nodes whose ids are exactly as long as the controller accepts form a chain
// of a channel whose name is exactly as long, and records flow through it.
// Node ids of 64 characters or more were once cut short in the replica
// hello, and such a node was refused as a predecessor forever: nothing was
// ever committed.
#include <chrono>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <thread>

#include <catena/broker/controller_routes.hpp>
#include <catena/broker/local_cluster.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/subscriber.hpp>
#include <catena/chain/limits.hpp>
#include <catena/control/controller_client.hpp>

#include "../test_env.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;
using namespace chain::limits;

using test::bytes;

TEST(Limits, LongestNodeIdsAndChannelNameCarryRecordsThroughAChain) {
  ClusterOptions o;
  o.nodes = 3;
  o.dir = "failover-limits";
  o.quiet = true;
  o.node_id_prefix = std::string(kMaxNodeIdLength - 2, 'n') + "-";  // ids node...n-0 .. -2
  LocalCluster cluster(o);
  std::string err;
  ASSERT_TRUE(cluster.start(&err)) << err;
  for (const auto& n : cluster.nodes()) EXPECT_EQ(n.node_id.size(), kMaxNodeIdLength) << n.node_id;

  control::ControllerClient::Options co;
  co.address = cluster.controller_address();
  control::ControllerClient admin(co);
  const std::string channel(kMaxChannelNameLength, 'c');
  control::idl::ChannelConfig cfg;
  cfg.name = channel;
  cfg.partitions = 1;
  cfg.replication = 3;  // every node is some replica's predecessor or successor
  cfg.segment_bytes = 1 << 20;
  cfg.ttl_ms = 600000;
  auto created = admin.create_channel(cfg);
  ASSERT_TRUE(created.ok()) << created.error().describe();

  cfg.name = channel + "c";
  auto refused = admin.create_channel(cfg);
  EXPECT_EQ(refused.code(), control::idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message.find("channel name must be 1..128 characters"), std::string::npos)
      << refused.error().describe();

  constexpr int kRecords = 200;
  broker::ControllerRoutes routes(co, "limits");
  auto pub = Publisher::create(routes, channel);
  ASSERT_TRUE(pub.ok()) << pub.error().message;
  int acked = 0;
  for (int i = 0; i < kRecords; ++i) {
    const std::string payload = "rec-" + std::to_string(i);
    for (;;) {
      auto e = pub.value()->publish_to(0, bytes(payload), [&](const PublishResult& r) {
        EXPECT_EQ(r.status, PublishStatus::ok) << client::to_string(r.status);
        acked += r.status == PublishStatus::ok;
      });
      if (e == client::ErrorCode::ok) break;
      ASSERT_EQ(e, client::ErrorCode::backpressure);
      pub.value()->poll();
    }
  }
  ASSERT_TRUE(pub.value()->flush(30s)) << "records not committed: a replica refused its predecessor?";
  EXPECT_EQ(acked, kRecords);

  SubscriberOptions so;
  so.read_from = SubscriberOptions::ReadFrom::tail;
  auto sub = Subscriber::create(routes, channel, so);
  ASSERT_TRUE(sub.ok()) << sub.error().message;
  std::set<std::uint64_t> offsets;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (offsets.size() < kRecords && std::chrono::steady_clock::now() < deadline) {
    if (sub.value()->poll([&](const Message& m) { offsets.insert(m.offset); }) == 0) {
      std::this_thread::sleep_for(1ms);
    }
  }
  EXPECT_EQ(offsets.size(), static_cast<std::size_t>(kRecords));
}

}  // namespace
}  // namespace catena
