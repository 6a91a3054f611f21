// Chain repair's joining stage and a chain's last member (repair_fixture.hpp):
// a replacement copies behind the tail and is promoted once the tail reports
// it caught up; the last member stays until its loss is proven (or an
// operator declares the partition lost) and the chain is rebuilt above its
// high-water mark.
#include <algorithm>
#include <gtest/gtest.h>

#include "repair_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::Ids;
using testing::joining_of;
using testing::Repair;

// The replacement copies behind the tail while the chain runs without it;
// only a tail report at the current epoch saying it synced the replacement
// (it holds every committed record) promotes it; a small backlog is not
// enough. Clients never see it before that.
TEST_F(Repair, JoiningNodeIsPromotedOnlyOnceTheTailReportsItSynced) {
  nodes_["b"].broker->set_backlog("orders", 0, 64 << 20);  // b becomes the tail
  kill_broker("c");
  run_for(2000ms, {"c"});
  ASSERT_EQ(state_of("c"), idl::NodeState::DEAD);

  auto r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b")})) << "clients get the chain without the joining node";
  EXPECT_EQ(joining_of(r), (Ids{id("d")}));
  auto described = controller_->describe_channel("orders");
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(joining_of(described->routes[0]), (Ids{id("d")}));
  for (const auto& name : {"a", "b", "d"}) {
    auto installed = nodes_[name].broker->installed("orders", 0);
    ASSERT_TRUE(installed.has_value()) << name;
    EXPECT_EQ(*installed, r) << name << ": every member, the joining one included, runs epoch 3";
  }
  EXPECT_EQ(replicas_held_by("d"), 1) << "a joining replica counts as load";
  EXPECT_EQ(controller_->cluster_status()->repairs_in_progress, 1) << "two replicas are not three";

  // A report from an older epoch is not about the link to d.
  idl::HeartbeatRequest stale;
  stale.__set_node_id(id("b"));
  stale.__set_node_epoch(nodes_["b"].epoch);
  idl::NodeStats old_progress;
  idl::PartitionProgress p;
  p.__set_channel("orders");
  p.__set_partition(0);
  p.__set_epoch(2);
  p.__set_successor_backlog_bytes(0);
  p.__set_successor_synced(true);
  old_progress.__set_partitions({p});
  stale.__set_stats(old_progress);
  for (int i = 0; i < 5; ++i) {
    clock_.advance(100ms);
    heartbeat_all_but({"b", "c"});
    ASSERT_TRUE(controller_->heartbeat(stale).ok());
    controller_->tick();
  }
  EXPECT_EQ(route("orders").epoch, 3);

  nodes_["b"].broker->set_backlog("orders", 0, 0);
  nodes_["b"].broker->set_synced("orders", 0, false);
  run_for(1000ms, {"c"});
  EXPECT_EQ(route("orders").epoch, 3) << "nothing owed, but not synced: it may lack committed records";
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b")}));

  nodes_["b"].broker->set_synced("orders", 0, true);
  run_for(300ms, {"c"});
  r = route("orders");
  EXPECT_EQ(r.epoch, 4);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("d")}));
  EXPECT_TRUE(r.joining.empty());
  EXPECT_EQ(nodes_["d"].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(replicas_held_by("d"), 1);
  expect_settled(r);
}

TEST_F(Repair, JoiningNodeThatDiesIsDroppedAndReplaced) {
  nodes_["b"].broker->set_backlog("orders", 0, 64 << 20);
  kill_broker("c");
  run_for(2000ms, {"c"});
  ASSERT_EQ(joining_of(route("orders")), (Ids{id("d")}));
  ASSERT_EQ(route("orders").epoch, 3);

  kill_broker("d");
  run_for(2000ms, {"c", "d"});
  ASSERT_EQ(state_of("d"), idl::NodeState::DEAD);
  auto r = route("orders");
  // Epoch 4 drops d (the chain itself is untouched), epoch 5 lets e join.
  EXPECT_EQ(r.epoch, 5);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b")}));
  EXPECT_EQ(joining_of(r), (Ids{id("e")}));
  const auto calls = nodes_["b"].broker->configure_calls();
  ASSERT_GE(calls.size(), 4u);
  EXPECT_EQ(calls[3].route.epoch, 4);
  EXPECT_EQ(chain_of(calls[3].route), (Ids{id("a"), id("b")}));
  EXPECT_TRUE(calls[3].route.joining.empty());
  EXPECT_EQ(controller_->cluster_status()->repairs_in_progress, 2);

  nodes_["b"].broker->set_backlog("orders", 0, 0);
  run_for(500ms, {"c", "d"});
  r = route("orders");
  EXPECT_EQ(r.epoch, 6);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("e")}));
  expect_settled(r);
}

// The tail dies while d is joining behind it: d re-links behind the new
// tail (its predecessor) and the chain gets one more joining node; they are
// promoted one at a time, each once the tail in front reports it caught up.
TEST_F(Repair, TailDiesWhileANodeJoinsAndTheJoiningNodeReLinks) {
  nodes_["b"].broker->set_backlog("orders", 0, 64 << 20);
  nodes_["a"].broker->set_backlog("orders", 0, 64 << 20);
  kill_broker("c");
  run_for(2000ms, {"c"});
  ASSERT_EQ(joining_of(route("orders")), (Ids{id("d")}));

  kill_broker("b");
  run_for(2000ms, {"b", "c"});
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 5) << "4: b dropped, d now joins behind a; 5: e joins behind d";
  EXPECT_EQ(chain_of(r), (Ids{id("a")}));
  EXPECT_EQ(joining_of(r), (Ids{id("d"), id("e")}));
  EXPECT_EQ(*nodes_["d"].broker->installed("orders", 0), r);
  const auto d_calls = nodes_["d"].broker->configure_calls();
  ASSERT_GE(d_calls.size(), 2u);
  EXPECT_EQ(chain_of(d_calls[1].route), (Ids{id("a")}));
  EXPECT_EQ(joining_of(d_calls[1].route), (Ids{id("d")}));

  nodes_["a"].broker->set_backlog("orders", 0, 0);
  nodes_["d"].broker->set_backlog("orders", 0, 64 << 20);
  run_for(500ms, {"b", "c"});
  r = route("orders");
  EXPECT_EQ(r.epoch, 6);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("d")}));
  EXPECT_EQ(joining_of(r), (Ids{id("e")}));

  nodes_["d"].broker->set_backlog("orders", 0, 0);
  run_for(500ms, {"b", "c"});
  r = route("orders");
  EXPECT_EQ(r.epoch, 7);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("d"), id("e")}));
  expect_settled(r);
}

// A chain never shrinks below its last member, which holds every
// acknowledged record: while it is unreachable the partition is unavailable
// (the route still names it, clients get no empty chain), and no
// replacement starts the partition over. Once it registers again without
// its data (a restarted, empty process), the loss is proven and the chain is
// rebuilt, starting above every offset the partition ever reported.
TEST_F(Repair, LastReplicaStaysUntilItsLossIsProvenThenTheChainIsRebuiltAboveItsHighWaterMark) {
  ASSERT_TRUE(controller_->create_channel(channel_config("solo", 1, 1)).ok());
  const auto solo = route("solo");
  ASSERT_EQ(chain_of(solo), (Ids{id("d")}));
  nodes_["d"].broker->set_end_offset("solo", 0, 1000);
  run_for(200ms);  // d reports offsets up to 1000
  kill_broker("d");
  run_for(2000ms, {"d"});
  ASSERT_EQ(state_of("d"), idl::NodeState::DEAD);
  auto r = route("solo");
  EXPECT_EQ(r.epoch, 1);
  EXPECT_EQ(chain_of(r), (Ids{id("d")})) << "the last replica left the chain";
  EXPECT_TRUE(r.joining.empty());
  EXPECT_TRUE(nodes_["e"].broker->epochs_seen("solo", 0).empty()) << "a replacement took over";

  register_again("d");  // restarted: holds nothing
  run_for(500ms);
  r = route("solo");
  EXPECT_EQ(r.epoch, 3) << "2: emptied (loss proven), 3: rebuilt";
  ASSERT_EQ(r.replicas.size(), 1u);
  // Offsets up to the mark (1000) were handed out, and records acknowledged
  // after the last report may have gone a little higher: the partition
  // continues at the next offset generation.
  EXPECT_EQ(r.start_offset, std::int64_t{1} << 32);
  for (const auto& [name, n] : nodes_) {
    for (const auto& a : n.broker->configure_calls()) {
      if (a.route.channel == "solo" && a.route.epoch > 1) {
        EXPECT_EQ(a.route.start_offset, std::int64_t{1} << 32) << name;
      }
    }
  }
  expect_settled(r);
}

// Joining replicas hold only a prefix of what the chain acknowledged: they
// never take a chain over. When its last member comes back with its data
// (fenced, not restarted), it is the chain again at a new epoch and the
// joining replica resumes copying from it.
TEST_F(Repair, JoiningNodesNeverTakeOverAChainItsLastMemberReturnsWithItsData) {
  ASSERT_TRUE(controller_->create_channel(channel_config("pair", 1, 2)).ok());
  ASSERT_EQ(chain_of(route("pair")), (Ids{id("d"), id("e")}));
  nodes_["d"].broker->set_backlog("pair", 0, 64 << 20);
  kill_broker("e");
  run_for(2000ms, {"e"});
  auto r = route("pair");
  ASSERT_EQ(chain_of(r), (Ids{id("d")}));
  ASSERT_EQ(r.joining.size(), 1u);
  const std::string joiner = r.joining[0].node_id;
  const auto epoch_before = r.epoch;

  kill_broker("d");
  run_for(2000ms, {"d", "e"});
  r = route("pair");
  EXPECT_EQ(r.epoch, epoch_before);
  EXPECT_EQ(chain_of(r), (Ids{id("d")})) << "the joining node took over a chain it holds a prefix of";
  EXPECT_EQ(joining_of(r), (Ids{joiner}));

  idl::PartitionProgress kept;
  kept.__set_channel("pair");
  kept.__set_partition(0);
  kept.__set_epoch(epoch_before);
  register_again("d", {kept});
  r = route("pair");
  EXPECT_EQ(r.epoch, epoch_before + 1);
  EXPECT_EQ(chain_of(r), (Ids{id("d")}));
  EXPECT_EQ(joining_of(r), (Ids{joiner}));
  nodes_["d"].broker->set_backlog("pair", 0, 0);
  run_for(1000ms, {"e"});
  r = route("pair");
  EXPECT_EQ(chain_of(r), (Ids{id("d"), joiner}));
  EXPECT_TRUE(nodes_["d"].broker->fences().empty()) << "d was told to drop the data only it holds";
}

// Issue 8: a partition whose last replica never comes back. The controller
// keeps the dead node as the chain (the partition is unavailable, never
// reset); an operator declares it lost, and only then is it rebuilt, above
// every offset ever handed out. Refused while any member is not DEAD.
TEST_F(Repair, OperatorDeclaresAPartitionLostWhoseLastReplicaNeverReturns) {
  ASSERT_TRUE(controller_->create_channel(channel_config("solo", 1, 1)).ok());
  ASSERT_EQ(chain_of(route("solo")), (Ids{id("d")}));
  nodes_["d"].broker->set_end_offset("solo", 0, 1000);
  run_for(200ms);

  auto refused = controller_->declare_partition_lost("solo", 0);
  ASSERT_FALSE(refused.ok()) << "declared lost while its replica is alive";
  EXPECT_EQ(refused.error().code, idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(route("solo").epoch, 1) << "a refused declaration changed the route";
  auto unknown = controller_->declare_partition_lost("nope", 0);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().code, idl::ErrorCode::UNKNOWN_CHANNEL);

  kill_broker("d");
  run_for(2000ms, {"d"});
  ASSERT_EQ(state_of("d"), idl::NodeState::DEAD);
  ASSERT_EQ(chain_of(route("solo")), (Ids{id("d")}))
      << "the last replica left the chain before anyone said so";

  auto lost = controller_->declare_partition_lost("solo", 0);
  ASSERT_TRUE(lost.ok()) << lost.error().describe();
  EXPECT_TRUE(lost->replicas.empty());
  EXPECT_EQ(lost->epoch, 2);
  run_for(500ms, {"d"});
  const auto r = route("solo");
  EXPECT_EQ(r.epoch, 3) << "2: emptied by the operator, 3: rebuilt";
  ASSERT_EQ(r.replicas.size(), 1u);
  EXPECT_NE(r.replicas[0].node_id, id("d"));
  EXPECT_EQ(r.start_offset, std::int64_t{1} << 32) << "not above every offset handed out";
}

}  // namespace
}  // namespace catena::control
