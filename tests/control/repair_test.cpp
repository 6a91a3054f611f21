// Chain repair after a node dies: order, epochs, pushes, replacement choice,
// the joining stage (a replacement copies behind the tail and is promoted
// once the tail reports it caught up), retries of failed pushes.
#include <atomic>
#include <gtest/gtest.h>

#include "controller_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::joining_of;
using Fate = InProcBrokerAdmin::Fate;
using Method = InProcBrokerAdmin::Method;
using Ids = std::vector<std::string>;

// a(z1) b(z2) c(z3) hold the chain [a, b, c]; d(z1) and e(z2) join later as
// spares, so a replacement choice between them shows zone awareness (d sorts
// first on every load key, e only wins on zone).
class Repair : public testing::ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
    auto ch = controller_->create_channel(channel_config("orders"));
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    ASSERT_EQ(chain_of(ch->routes[0]), (Ids{id("a"), id("b"), id("c")}));
    add_node("d", "z1");
    add_node("e", "z2");
  }

  // Kills name and runs until its chains are back to three replicas.
  void kill_and_repair(const std::string& name) {
    kill_broker(name);
    run_for(2000ms, {name});
    ASSERT_EQ(state_of(name), idl::NodeState::DEAD);
  }

  std::int32_t replicas_held_by(const std::string& name) {
    auto status = controller_->cluster_status();
    EXPECT_TRUE(status.ok());
    for (const auto& s : status->nodes) {
      if (s.info.node_id == id(name)) return s.replicas;
    }
    ADD_FAILURE() << "no status for " << name;
    return -1;
  }

  // Every broker in the final route has it installed, and the repair is closed.
  void expect_settled(const idl::PartitionRoute& r) {
    for (const auto& rep : r.replicas) {
      for (const auto& [name, n] : nodes_) {
        if (n.id != rep.node_id) continue;
        auto installed = n.broker->installed(r.channel, r.partition);
        ASSERT_TRUE(installed.has_value()) << name;
        EXPECT_EQ(*installed, r) << name;
      }
    }
    auto status = controller_->cluster_status();
    ASSERT_TRUE(status.ok());
    EXPECT_EQ(status->repairs_in_progress, 0);
    EXPECT_TRUE(controller_->metadata().intents.empty());
  }
};

TEST_F(Repair, HeadDiesNextBecomesHead) {
  kill_and_repair("a");
  const auto r = route("orders");
  EXPECT_EQ(r.epoch, 4);
  // Epoch 2 is [b, c]; at epoch 3 the replacement joins behind the tail; at
  // epoch 4, caught up, it is the tail. a was the only z1 replica, so d (z1)
  // keeps the zones distinct; e would double z2.
  EXPECT_EQ(chain_of(r), (Ids{id("b"), id("c"), id("d")}));
  EXPECT_TRUE(r.joining.empty());
  EXPECT_EQ(nodes_["b"].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(nodes_["c"].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(nodes_["d"].broker->epochs_seen("orders", 0), (std::vector<std::int64_t>{3, 4}));
  const auto calls = nodes_["b"].broker->configure_calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(chain_of(calls[1].route), (Ids{id("b"), id("c")}));
  EXPECT_EQ(calls[1].segment_bytes, 1 << 20);
  EXPECT_EQ(calls[1].ttl_ms, 60000);
  EXPECT_EQ(calls[1].channel_partitions, 1);
  EXPECT_EQ(chain_of(calls[2].route), (Ids{id("b"), id("c")}));
  EXPECT_EQ(joining_of(calls[2].route), (Ids{id("d")}));
  EXPECT_EQ(calls[2].route.epoch, 3);
  expect_settled(r);
}

TEST_F(Repair, MiddleDiesPredecessorLinksToSuccessorAndTheReplacementIsZoneAware) {
  kill_and_repair("b");
  const auto r = route("orders");
  EXPECT_EQ(r.epoch, 4);
  // b was the only z2 replica: e (z2) is picked although d sorts first.
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("c"), id("e")}));
  const auto calls = nodes_["a"].broker->configure_calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(chain_of(calls[1].route), (Ids{id("a"), id("c")}));
  EXPECT_EQ(calls[1].route.epoch, 2);
  expect_settled(r);
}

TEST_F(Repair, TailDiesPredecessorBecomesTail) {
  kill_and_repair("c");
  const auto r = route("orders");
  EXPECT_EQ(r.epoch, 4);
  // c was the only z3 node: no spare restores three zones, so the least
  // loaded spare wins (d and e tie on load: id order).
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("d")}));
  const auto calls = nodes_["b"].broker->configure_calls();
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(chain_of(calls[1].route), (Ids{id("a"), id("b")}));
  EXPECT_EQ(calls[1].route.replicas.back().node_id, id("b"));
  expect_settled(r);
}

TEST_F(Repair, ReplacementPrefersTheLessLoadedOfEquallyGoodZones) {
  idl::NodeStats busy;
  busy.__set_segments(50);
  idl::HeartbeatRequest hb;
  hb.__set_node_id(id("d"));
  hb.__set_node_epoch(nodes_["d"].epoch);
  hb.__set_stats(busy);
  ASSERT_TRUE(controller_->heartbeat(hb).ok());
  kill_broker("c");
  // Keep d's heavy stats current while time runs.
  for (int i = 0; i < 20; ++i) {
    clock_.advance(100ms);
    heartbeat_all_but({"c", "d"});
    ASSERT_TRUE(controller_->heartbeat(hb).ok());
    controller_->tick();
  }
  // No spare is in z3; d and e each repeat a zone, and d is busier.
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("e")}));
}

TEST_F(Repair, EveryRouteOfTheDeadNodeIsRepaired) {
  ASSERT_TRUE(controller_->create_channel(channel_config("more", 8, 3)).ok());
  kill_and_repair("b");
  const auto channels = controller_->list_channels();
  ASSERT_TRUE(channels.ok());
  for (const auto& ch : *channels) {
    for (const auto& r : ch.routes) {
      const auto chain = chain_of(r);
      EXPECT_EQ(chain.size(), 3u) << ch.config.name << "/" << r.partition;
      EXPECT_EQ(std::count(chain.begin(), chain.end(), id("b")), 0);
      expect_settled(r);
    }
  }
}

TEST_F(Repair, FailedPushIsPersistedAndRetried) {
  bool partitioned = true;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return partitioned && call.method == Method::configure_chain && call.to.node_id == id("e")
               ? Fate::drop_request
               : Fate::deliver;
  });
  auto ch = controller_->create_channel(channel_config("late", 1, 2));
  ASSERT_TRUE(ch.ok()) << "a failed push does not fail the request";
  EXPECT_EQ(chain_of(ch->routes[0]), (Ids{id("d"), id("e")}));
  EXPECT_TRUE(nodes_["d"].broker->installed("late", 0).has_value());
  EXPECT_FALSE(nodes_["e"].broker->installed("late", 0).has_value());

  // Not before the back-off expires...
  controller_->tick();
  EXPECT_FALSE(nodes_["e"].broker->installed("late", 0).has_value());
  // ...and the route survives a restart in the meantime.
  restart();
  partitioned = false;
  run_for(200ms);
  EXPECT_TRUE(nodes_["e"].broker->installed("late", 0).has_value());
  EXPECT_EQ(nodes_["d"].broker->epochs_seen("late", 0), (std::vector<std::int64_t>{1, 1}))
      << "after a restart every route is pushed again, at the same epoch";
}

TEST_F(Repair, HeartbeatCutsThePushBackOffShort) {
  heartbeat_loss_ = std::chrono::milliseconds(60000);  // e stays silent for 6 s here, answering probes
  restart();
  bool partitioned = true;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return partitioned && call.method == Method::configure_chain && call.to.node_id == id("e")
               ? Fate::drop_request
               : Fate::deliver;
  });
  ASSERT_TRUE(controller_->create_channel(channel_config("late", 1, 2)).ok());
  // Several failures push the back-off to its 1 s cap.
  for (int i = 0; i < 6; ++i) {
    clock_.advance(1000ms);
    heartbeat_all_but({"e"});
    controller_->tick();
  }
  partitioned = false;
  clock_.advance(10ms);
  controller_->tick();
  EXPECT_FALSE(nodes_["e"].broker->installed("late", 0).has_value()) << "still backing off";
  heartbeat("e");
  controller_->tick();
  EXPECT_TRUE(nodes_["e"].broker->installed("late", 0).has_value());
}

TEST_F(Repair, LostAcknowledgementIsRetriedIdempotently) {
  std::atomic<int> lost{0};
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return call.method == Method::configure_chain && call.to.node_id == id("d") && lost++ == 0
               ? Fate::drop_reply
               : Fate::deliver;
  });
  ASSERT_TRUE(controller_->create_channel(channel_config("dup", 1, 2)).ok());
  run_for(300ms);
  EXPECT_EQ(nodes_["d"].broker->epochs_seen("dup", 0), (std::vector<std::int64_t>{1, 1}));
  EXPECT_TRUE(nodes_["d"].broker->installed("dup", 0).has_value());
}

TEST_F(Repair, DelayedOldConfigurationCannotRollABrokerBack) {
  // Hold b's epoch-2 push in the network, let the repair go on, then deliver
  // the held push after the newer one: the broker's epoch check refuses it.
  std::atomic<int> holds{0};
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return call.method == Method::configure_chain && call.to.node_id == id("b") &&
                   call.assignment.route.epoch == 2 && holds++ == 0
               ? Fate::hold
               : Fate::deliver;
  });
  kill_broker("a");
  run_for(2000ms, {"a"});  // held once, retried, acknowledged, then epochs 3 and 4
  ASSERT_EQ(admin_.held(), 1u);
  ASSERT_EQ(route("orders").epoch, 4);
  EXPECT_EQ(admin_.release_held(/*newest_first=*/true), 1u);
  EXPECT_EQ(nodes_["b"].broker->installed("orders", 0)->epoch, 4);
}

TEST_F(Repair, ReplicationIsRestoredWhenANodeArrives) {
  ASSERT_TRUE(controller_->create_channel(channel_config("wide", 1, 5)).ok());
  kill_and_repair("e");
  auto r = route("wide");
  EXPECT_EQ(r.replicas.size(), 4u) << "no spare: the chain runs short";
  EXPECT_EQ(controller_->cluster_status()->repairs_in_progress, 1);
  add_node("f", "z4");
  run_for(500ms, {"e"});
  r = route("wide");
  EXPECT_EQ(r.replicas.size(), 5u);
  EXPECT_EQ(r.replicas.back().node_id, id("f"));
  expect_settled(r);
}

TEST_F(Repair, ReRegistrationTakesTheOldIncarnationOutOfItsChains) {
  // b restarts (losing its memory) and registers again before anyone noticed.
  add_node("b", "z2", id("b"));
  auto r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("c")}));
  EXPECT_EQ(r.epoch, 2);
  run_for(500ms);
  r = route("orders");
  EXPECT_EQ(r.epoch, 4);
  // The fresh b is an empty node like any other spare: it restores z2 and
  // wins the load tie with e on id order.
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("c"), id("b")}));
  EXPECT_TRUE(nodes_["b"].broker->fences().empty()) << "the new incarnation must not be fenced";
  expect_settled(r);
}

TEST_F(Repair, NewNodeAtAnOldAdminAddressDisplacesTheOldNode) {
  add_node("b", "z2");  // same admin address, no id: a different node now
  EXPECT_EQ(state_of("a"), idl::NodeState::ALIVE);
  auto status = controller_->cluster_status();
  int dead = 0;
  for (const auto& s : status->nodes) dead += s.state == idl::NodeState::DEAD;
  EXPECT_EQ(dead, 1);
  EXPECT_EQ(route("orders").epoch, 2);
}

TEST_F(Repair, EvictedNodeIsToldToFenceIfReachable) {
  // c's heartbeats stop and its probes fail, but its admin port still
  // answers fences: it hears that it was replaced.
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return call.method == Method::ping && call.to.node_id == id("c") ? Fate::drop_request : Fate::deliver;
  });
  run_for(1000ms, {"c"});
  ASSERT_EQ(state_of("c"), idl::NodeState::DEAD);
  const auto fences = nodes_["c"].broker->fences();
  ASSERT_EQ(fences.size(), 1u);
  EXPECT_EQ(fences[0].channel, "orders");
  EXPECT_EQ(fences[0].epoch, 2);
}

// The replacement copies behind the tail while the chain runs without it;
// only a tail report at the current epoch with a backlog within the limit
// promotes it. Clients never see it before that.
TEST_F(Repair, JoiningNodeIsPromotedOnlyOnceTheTailReportsItCaughtUp) {
  const std::int64_t limit = Controller::promote_backlog_limit(1 << 20);
  ASSERT_EQ(limit, 1 << 20) << "max(1 MiB, segment/4) for a 1 MiB segment";
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
  old_progress.__set_partitions({p});
  stale.__set_stats(old_progress);
  for (int i = 0; i < 5; ++i) {
    clock_.advance(100ms);
    heartbeat_all_but({"b", "c"});
    ASSERT_TRUE(controller_->heartbeat(stale).ok());
    controller_->tick();
  }
  EXPECT_EQ(route("orders").epoch, 3);

  nodes_["b"].broker->set_backlog("orders", 0, limit + 1);
  run_for(1000ms, {"c"});
  EXPECT_EQ(route("orders").epoch, 3) << "one byte over the limit";
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b")}));

  nodes_["b"].broker->set_backlog("orders", 0, limit);
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

// Issue 8, sequence 7: a fault only the data plane sees. The head reports
// every second that it cannot use its link to the middle, while the middle
// answers every probe and heartbeat. After link_fault_timeout (3 s) of such
// reports the middle is evicted and the chain repaired without it.
class LinkFaults : public Repair {
 protected:
  idl::FailureReport link_report(const std::string& reporter, const std::string& suspect) {
    idl::FailureReport rep;
    rep.__set_reporter(id(reporter));
    rep.__set_suspect_node_id(id(suspect));
    rep.__set_channel("orders");
    rep.__set_partition(0);
    rep.__set_epoch(route("orders").epoch);
    rep.__set_reason("no link to the successor");
    return rep;
  }

  // Runs with every node heartbeating, but those already evicted (a fenced
  // node stops and registers again; not needed here).
  void run_alive(std::chrono::milliseconds total) {
    for (auto t = 0ms; t < total; t += 100ms) {
      std::set<std::string> dead;
      for (const auto& [name, n] : nodes_) {
        if (state_of(name) == idl::NodeState::DEAD) dead.insert(name);
      }
      run_for(100ms, dead);
    }
  }

  // `reporter` reports `suspect` once a second for `total` while the nodes heartbeat.
  void report_for(std::chrono::milliseconds total, const std::string& reporter, const std::string& suspect) {
    for (auto t = 0ms; t < total; t += 1000ms) {
      if (state_of(suspect) == idl::NodeState::DEAD || state_of(reporter) == idl::NodeState::DEAD) return;
      auto r = controller_->report_failure(link_report(reporter, suspect));
      ASSERT_TRUE(r.ok()) << r.error().describe();
      run_alive(1000ms);
    }
  }
};

TEST_F(LinkFaults, APersistentLinkFaultEvictsTheSuccessorThatStillAnswersProbes) {
  report_for(2000ms, "a", "b");
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE) << "evicted before the link fault had lasted its timeout";
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("c")}));
  report_for(3000ms, "a", "b");
  EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
  run_alive(2000ms);
  const auto chain = chain_of(route("orders"));
  EXPECT_EQ(chain.size(), 3u);
  EXPECT_EQ(std::count(chain.begin(), chain.end(), id("b")), 0) << "b is still in the chain";
  EXPECT_EQ(state_of("a"), idl::NodeState::ALIVE);
}

TEST_F(LinkFaults, ReportsFromANodeThatIsNotTheSuspectsPredecessorEvictNobody) {
  // c is b's successor, a is not c's predecessor: neither writes to the
  // suspect, so neither can tell that its link is the problem.
  report_for(6000ms, "c", "b");
  report_for(6000ms, "a", "c");
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE);
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  EXPECT_EQ(chain_of(route("orders")), (Ids{id("a"), id("b"), id("c")}));
}

TEST_F(LinkFaults, ReportsThatStopAreForgotten) {
  report_for(2000ms, "a", "b");
  run_alive(4000ms);  // the link came back: no reports for longer than the timeout
  report_for(2000ms, "a", "b");
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE) << "two separate short faults added up to an eviction";
}

TEST_F(LinkFaults, AReporterWhoseReportsKeepEvictingIsEvictedItself) {
  // a's own data plane is broken: it cannot reach b, and then cannot reach
  // the replacement either. The second time, a is the common factor.
  report_for(4000ms, "a", "b");
  ASSERT_EQ(state_of("b"), idl::NodeState::DEAD);
  run_alive(2000ms);
  auto r = route("orders");
  ASSERT_EQ(chain_of(r).size(), 3u);
  ASSERT_EQ(chain_of(r)[0], id("a"));
  const std::string next = chain_of(r)[1];
  std::string next_name;
  for (const auto& [name, n] : nodes_) {
    if (n.id == next) next_name = name;
  }
  report_for(4000ms, "a", next_name);
  EXPECT_EQ(state_of("a"), idl::NodeState::DEAD) << "a's reports evicted " << next_name << " too";
  EXPECT_EQ(state_of(next_name), idl::NodeState::ALIVE);
}

}  // namespace
}  // namespace catena::control

namespace catena::control {
namespace {

// An asymmetric cut: the controller reaches b (its probes are answered) but
// b's heartbeats never arrive, so b's lease is never renewed and its chain
// stalls. On main b stayed ALIVE forever (every answered probe opened a fresh
// timeout window). After 4 x heartbeat_timeout without a heartbeat it is
// evicted and the chain repaired.
TEST_F(Repair, NodeThatAnswersProbesButWhoseHeartbeatsNeverArriveIsEvicted) {
  run_for(1000ms, {"b"});  // 2 x the heartbeat timeout: probes answered, b suspected and cleared
  EXPECT_NE(state_of("b"), idl::NodeState::DEAD)
      << "evicted before its heartbeats were missing for 4x the timeout";
  run_for(2000ms, {"b"});
  EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
  EXPECT_GT(nodes_["b"].broker->pings(), 0) << "b was never probed: not an asymmetric cut";
  run_for(2000ms, {"b"});
  const auto chain = chain_of(route("orders"));
  EXPECT_EQ(chain.size(), 3u);
  EXPECT_EQ(std::count(chain.begin(), chain.end(), id("b")), 0) << "b is still in the chain";
}

}  // namespace
}  // namespace catena::control

namespace catena::control {
namespace {

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
