// Chain repair after a node dies (repair_fixture.hpp): order, epochs,
// pushes, replacement choice, retries of failed pushes, re-registration,
// and a node whose heartbeats never arrive while it answers probes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <gtest/gtest.h>
#include <mutex>
#include <thread>

#include "repair_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::joining_of;
using Fate = InProcBrokerAdmin::Fate;
using Method = InProcBrokerAdmin::Method;
using testing::Ids;
using testing::Repair;

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

// A tenant whose data may only be in zone z1 (TenantQuotas.zones): its
// chains are placed there when created and altered, repaired only there (a
// chain stays short while z1 has no spare), and moves, drains and
// rebalances never take them elsewhere; a channel of no tenant uses every
// zone. Nodes: a(z1) b(z2) c(z3) d(z1) e(z2).
TEST_F(Repair, ATenantsChainsStayInItsZonesThroughEveryPlacement) {
  idl::TenantQuotas q;
  q.__set_zones({"z1"});
  ASSERT_TRUE(controller_->create_tenant("acme", q).ok());
  const std::set<std::string> z1{id("a"), id("d")};
  auto in_z1 = [&](const idl::PartitionRoute& r, std::set<std::string> allowed) {
    for (const auto& n : chain_of(r))
      EXPECT_TRUE(allowed.contains(n)) << r.channel << "/" << r.partition << ": " << n;
    for (const auto& n : joining_of(r))
      EXPECT_TRUE(allowed.contains(n)) << r.channel << "/" << r.partition << ": " << n;
  };
  auto ch = controller_->create_channel(channel_config("acme.x", 2, 2));
  ASSERT_TRUE(ch.ok()) << ch.error().describe();
  for (const auto& r : ch->routes) {
    EXPECT_EQ(chain_of(r).size(), 2u);
    in_z1(r, z1);
  }
  // Three replicas need three z1 nodes: refused, and the message says why.
  auto wide = controller_->create_channel(channel_config("acme.wide", 1, 3));
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.error().message.find("zones tenant 'acme' allows (z1)"), std::string::npos)
      << wide.error().message;
  // No tenant: any zone (b, c, e are free of "orders"' load but not of zones).
  auto open = controller_->create_channel(channel_config("open", 1, 3));
  ASSERT_TRUE(open.ok()) << open.error().describe();
  // d dies: no other z1 node, so acme's chains stay at a alone.
  kill_and_repair("d");
  for (int p = 0; p < 2; ++p) {
    const auto r = route("acme.x", p);
    EXPECT_EQ(chain_of(r), (Ids{id("a")})) << p;
    EXPECT_TRUE(joining_of(r).empty()) << p;
  }
  // A z1 node arrives: acme's chains are repaired onto it.
  add_node("f", "z1");
  run_for(2000ms, {"d"});
  const std::set<std::string> z1_now{id("a"), id("f")};
  for (int p = 0; p < 2; ++p) {
    const auto r = route("acme.x", p);
    EXPECT_EQ(chain_of(r).size() + joining_of(r).size(), 2u) << p;
    in_z1(r, z1_now);
  }
  // A grow places its partitions there too.
  auto grown = controller_->alter_channel("acme.x", 3);
  ASSERT_TRUE(grown.ok()) << grown.error().describe();
  in_z1(route("acme.x", 2), z1_now);
  // A move out of z1 is refused; draining a would need another z1 node.
  auto moved = controller_->move_partition("acme.x", 0, {id("b"), id("a")});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.error().code, idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(moved.error().message.find("outside the zones tenant 'acme' allows"), std::string::npos)
      << moved.error().message;
  EXPECT_FALSE(controller_->drain_node(id("a")).ok()) << "no z1 node is left to take a's place";
  // A new node in z2 gets load from a rebalance, none of it acme's.
  add_node("g", "z2");
  run_for(300ms, {"d"});
  auto plan = controller_->rebalance(/*dry_run=*/true);
  ASSERT_TRUE(plan.ok()) << plan.error().describe();
  for (const auto& m : plan->moves) {
    if (m.channel.rfind("acme.", 0) == 0) {
      for (const auto& n : m.to)
        EXPECT_TRUE(z1_now.contains(n)) << m.channel << "/" << m.partition << ": " << n;
    }
  }
}

// Issue 14: "no broker RPC is waited on while the controller's lock is
// held". A broker that takes its time over a configureChain (a slow or
// half-dead machine, up to the RPC timeout) must not stall the rest of the
// cluster's heartbeats and requests behind it.
TEST_F(Repair, ASlowBrokerPushHoldsUpNoHeartbeatOrRequest) {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool released = false;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == Method::configure_chain && call.to.node_id == id("d")) {
      std::unique_lock lock(mu);
      entered = true;
      cv.notify_all();
      // At most 20 s: a broken controller fails this test, it does not hang it.
      cv.wait_for(lock, 20s, [&] { return released; });
    }
    return Fate::deliver;
  });
  // A new channel whose chain includes d: its creation pushes to d.
  auto create = std::async(std::launch::async, [&] {
    auto config = channel_config("slow");
    config.__set_replication(5);
    return controller_->create_channel(config);
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return entered; })) << "no push reached d";
  }
  // While d's push is stuck: other nodes heartbeat, clients read routes.
  auto others = std::async(std::launch::async, [&] {
    for (const auto* name : {"a", "b", "c", "e"}) heartbeat(name);
    return controller_->get_route("orders", 0, 0).ok() && controller_->cluster_status().ok();
  });
  const auto answered = others.wait_for(10s);
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  EXPECT_EQ(answered, std::future_status::ready)
      << "heartbeats and route lookups waited for a slow broker's push (the controller's lock was held)";
  EXPECT_TRUE(others.get());
  auto created = create.get();
  EXPECT_TRUE(created.ok()) << created.error().describe();
  admin_.set_hook({});
}

// Issue 14: "probes and pushes go through a bounded pool". A round to many
// brokers must not start a thread per broker.
TEST_F(Repair, APushRoundRunsOnTheBoundedBrokerRpcPool) {
  auto o = options();
  o.broker_rpc_threads = 2;
  controller_.reset();
  auto c = Controller::open(o, clock_, admin_);
  ASSERT_TRUE(c.ok()) << c.error().describe();
  controller_ = std::move(*c);
  std::atomic<int> in_flight{0};
  std::atomic<int> most{0};
  std::atomic<int> pushes{0};
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method != Method::configure_chain) return Fate::deliver;
    const int now = ++in_flight;
    for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(30ms);  // a broker taking its time: the others would overlap it
    --in_flight;
    ++pushes;
    return Fate::deliver;
  });
  auto config = channel_config("wide");
  config.__set_replication(5);
  auto created = controller_->create_channel(config);
  ASSERT_TRUE(created.ok()) << created.error().describe();
  admin_.set_hook({});
  EXPECT_GE(pushes.load(), 5);  // one per broker of the chain, at least
  EXPECT_EQ(most.load(), 2) << "a push round ran more BrokerAdmin calls at once than its pool has threads";
}

}  // namespace
}  // namespace catena::control
