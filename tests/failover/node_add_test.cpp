// Adding a node end to end (issue 11 part 2), with real processes: three
// brokers carry channel "f" (four partitions, R=3) under a steady publisher
// and two live subscribers; a fourth broker starts with --join-rebalance,
// and once it registered it has the controller rebalance (Controller.addNode):
// partition roles move onto it by tail-offset handoff, no history copied.
// Every acknowledged record is still read once, in order, at its offset.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "failover_fixture.hpp"

namespace catena::testing {
namespace {

class NodeAdd : public Failover {
 protected:
  static constexpr int kPartitions = 4;

  void SetUp() override {
    ClusterOptions o = default_options();
    o.nodes = 3;  // zone-a, zone-b, zone-c: every chain spans all three
    partitions_ = kPartitions;
    start_cluster(o);
  }

  std::vector<control::idl::PartitionRoute> routes() {
    std::vector<control::idl::PartitionRoute> out;
    for (int p = 0; p < kPartitions; ++p) {
      auto r = admin_->get_route("f", p, 0);
      EXPECT_TRUE(r.ok()) << r.error().describe();
      if (r.ok()) out.push_back(*r);
    }
    return out;
  }

  static bool names(const control::idl::PartitionRoute& r, const std::string& id) {
    return std::any_of(r.replicas.begin(), r.replicas.end(),
                       [&](const control::idl::Replica& rep) { return rep.node_id == id; });
  }
};

TEST_F(NodeAdd, ABrokerStartedWithJoinRebalanceTakesRolesUnderTraffic) {
  std::string added;
  std::vector<control::idl::PartitionRoute> before;
  run_with_fault([&] {
    before = routes();
    const auto started = Clock::now();
    std::string err;
    // Index 3: zone-a, so it can only take node-0's place in a chain; node-0
    // holds all four partitions, the newcomer none: two of them move over.
    ASSERT_TRUE(cluster_->add_node(&err, {"--join-rebalance"})) << err;
    added = cluster_->nodes().back().node_id;
    ASSERT_TRUE(wait_for(
        [&] {
          auto s = status_of(added);
          return s && s->replicas >= 2;
        },
        30s, "the added node serving two partitions"));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    std::printf("%s started, registered and took 2 partitions in %lld ms\n", added.c_str(),
                static_cast<long long>(took.count()));
    RecordProperty("join_ms", static_cast<int>(took.count()));
  });
  ASSERT_FALSE(added.empty());
  const auto after = routes();
  ASSERT_EQ(after.size(), before.size());
  int held = 0;
  for (std::size_t p = 0; p < after.size(); ++p) {
    SCOPED_TRACE("partition " + std::to_string(p));
    EXPECT_EQ(after[p].replicas.size(), 3u);
    EXPECT_TRUE(after[p].joining.empty());
    if (!names(after[p], added)) continue;
    ++held;
    EXPECT_FALSE(names(before[p], added));
    // A handoff: the new chain serves from the old head's end on; the old
    // chain keeps what it held as a sealed range (nothing was copied).
    EXPECT_GT(after[p].start_offset, before[p].start_offset);
    ASSERT_FALSE(after[p].sealed.empty());
    EXPECT_EQ(after[p].sealed.back().end_offset, after[p].start_offset);
    EXPECT_FALSE(std::any_of(after[p].sealed.begin(), after[p].sealed.end(), [&](const auto& range) {
      return std::any_of(range.replicas.begin(), range.replicas.end(),
                         [&](const control::idl::Replica& rep) { return rep.node_id == added; });
    })) << "the added node holds no history";
  }
  EXPECT_EQ(held, 2) << "it took node-0's place in two of the four chains";
  const auto status = status_of(added);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->state, control::idl::NodeState::ALIVE);
  EXPECT_EQ(status->replicas, 2);
  // It serves its roles: its heartbeats report the records published after
  // the moves committed in each of its partitions, from the moved offset on.
  int serving = 0;
  for (const auto& progress : status->stats.partitions) {
    const auto& route = after.at(static_cast<std::size_t>(progress.partition));
    if (progress.channel != "f" || !names(route, added)) continue;
    EXPECT_GT(progress.commit_offset, route.start_offset) << "partition " << progress.partition;
    ++serving;
  }
  EXPECT_EQ(serving, 2) << "its heartbeat reports both partitions";
  expect_fresh_reader_sees_every_ack();
}

}  // namespace
}  // namespace catena::testing
