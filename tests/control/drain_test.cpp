// Draining a node (Controller::drain_node, controller_drain.cpp) on the
// repair fixture (repair_fixture.hpp: a(z1) b(z2) c(z3) hold "orders", d(z1)
// and e(z2) are spares): a replacement joins behind the tail, and the route
// change that promotes it takes the drained node out of the chain, whatever
// its place; what the drain refuses; and a failure at each step.
#include <algorithm>
#include <gtest/gtest.h>
#include <string>
#include <tuple>
#include <vector>

#include "repair_fixture.hpp"
#include "zk_server.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::Ids;
using testing::joining_of;
using testing::Store;
using testing::store_name;

class Drain : public testing::Repair {
 protected:
  idl::DrainState::type drain_state(const std::string& name) {
    auto status = controller_->cluster_status();
    EXPECT_TRUE(status.ok());
    for (const auto& s : status->nodes) {
      if (s.info.node_id == id(name)) return s.drain;
    }
    ADD_FAILURE() << "no status for " << name;
    return idl::DrainState::SERVING;
  }

  // No route names the node: not in a chain, not joining, not in a sealed range.
  bool in_no_route(const std::string& name) {
    const auto channels = controller_->list_channels();
    EXPECT_TRUE(channels.ok());
    if (!channels.ok()) return false;
    for (const auto& ch : *channels) {
      for (const auto& r : ch.routes) {
        Ids all = chain_of(r);
        for (const auto& j : r.joining) all.push_back(j.node_id);
        for (const auto& range : r.sealed) {
          for (const auto& rep : range.replicas) all.push_back(rep.node_id);
        }
        if (std::find(all.begin(), all.end(), id(name)) != all.end()) return false;
      }
    }
    return true;
  }

  bool fenced_at(const std::string& name, std::int64_t epoch) {
    const auto fences = nodes_[name].broker->fences();
    return std::any_of(fences.begin(), fences.end(), [&](const auto& f) {
      return f.channel == "orders" && f.partition == 0 && f.epoch == epoch;
    });
  }

  // Drains `name` of "orders" with the tail holding the replacement back
  // until the test has looked at the joining stage.
  void drain_through_joining(const std::string& name, const std::string& tail, const std::string& spare) {
    nodes_[tail].broker->set_backlog("orders", 0, 64 << 20);
    auto started = controller_->drain_node(id(name));
    ASSERT_TRUE(started.ok()) << started.error().describe();
    EXPECT_EQ(started->drain, idl::DrainState::DRAINING);
    EXPECT_EQ(started->replicas, 1);
    run_for(500ms);
    auto r = route("orders");
    EXPECT_EQ(r.epoch, 2);
    EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("c")})) << "it serves while its replacement copies";
    EXPECT_EQ(joining_of(r), (Ids{id(spare)}));
    EXPECT_EQ(drain_state(name), idl::DrainState::DRAINING);
    EXPECT_EQ(state_of(name), idl::NodeState::ALIVE);
    nodes_[tail].broker->set_backlog("orders", 0, 0);
    run_for(500ms);
  }
};

TEST_F(Drain, HeadLeavesInTheRouteChangeThatPromotesItsReplacement) {
  drain_through_joining("a", "c", "d");  // d: a's zone, z1, is free again
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(chain_of(r), (Ids{id("b"), id("c"), id("d")})) << "b is the head now";
  EXPECT_TRUE(r.joining.empty());
  EXPECT_EQ(r.start_offset, 0) << "no offset changes";
  EXPECT_TRUE(fenced_at("a", 3));
  EXPECT_EQ(drain_state("a"), idl::DrainState::DRAINED);
  EXPECT_EQ(replicas_held_by("a"), 0);
  EXPECT_TRUE(in_no_route("a"));
  EXPECT_EQ(controller_->metadata().nodes.at(id("a")).drain, idl::DrainState::DRAINED);
  expect_settled(r);
}

TEST_F(Drain, MiddleLeavesAndItsNeighboursLink) {
  drain_through_joining("b", "c", "e");
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("c"), id("e")}));
  EXPECT_TRUE(fenced_at("b", 3));
  EXPECT_EQ(drain_state("b"), idl::DrainState::DRAINED);
  expect_settled(r);
}

TEST_F(Drain, TailHandsOverToTheReplicaItSynced) {
  add_node("f", "z3");
  drain_through_joining("c", "c", "f");  // the tail itself reports f synced
  auto r = route("orders");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("f")}));
  EXPECT_TRUE(fenced_at("c", 3));
  EXPECT_EQ(drain_state("c"), idl::DrainState::DRAINED);
  expect_settled(r);
}

TEST_F(Drain, RefusesUnknownDeadRunningAndDrainedNodes) {
  auto unknown = controller_->drain_node("nope");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.code(), idl::ErrorCode::UNKNOWN_NODE);

  ASSERT_TRUE(controller_->drain_node(id("a")).ok());
  auto again = controller_->drain_node(id("a"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(again.error().message.find("already draining"), std::string::npos) << again.error().message;
  run_for(1000ms);
  ASSERT_EQ(drain_state("a"), idl::DrainState::DRAINED);
  auto drained = controller_->drain_node(id("a"));
  ASSERT_FALSE(drained.ok());
  EXPECT_NE(drained.error().message.find("already drained"), std::string::npos) << drained.error().message;

  kill_and_repair("e");
  auto dead = controller_->drain_node(id("e"));
  ASSERT_FALSE(dead.ok());
  EXPECT_EQ(dead.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(dead.error().message.find("DEAD"), std::string::npos) << dead.error().message;
}

TEST_F(Drain, RefusesToTakeTheLastNodeOfAZoneOutOfAChainSpanningIt) {
  auto r = controller_->drain_node(id("c"));  // the only z3 node
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::NOT_ENOUGH_NODES);
  EXPECT_NE(r.error().message.find("zone 'z3'"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("orders/0"), std::string::npos) << r.error().message;
  EXPECT_EQ(drain_state("c"), idl::DrainState::SERVING) << "nothing changed";
  EXPECT_EQ(route("orders").epoch, 1);
}

TEST_F(Drain, RefusesWhenNoOtherNodeCanTakeItsPlace) {
  ASSERT_TRUE(controller_->create_channel(channel_config("wide", 1, 5)).ok());  // on all five
  auto r = controller_->drain_node(id("d"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::NOT_ENOUGH_NODES);
  EXPECT_NE(r.error().message.find("wide/0"), std::string::npos) << r.error().message;
}

TEST_F(Drain, ADrainingNodeTakesNoNewPartitions) {
  ASSERT_TRUE(controller_->drain_node(id("d")).ok());  // in no chain: drained at once
  run_for(200ms);
  EXPECT_EQ(drain_state("d"), idl::DrainState::DRAINED);
  for (int i = 0; i < 4; ++i) {
    auto ch = controller_->create_channel(channel_config("more" + std::to_string(i)));
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }
  EXPECT_TRUE(in_no_route("d"));
  auto moved = controller_->move_partition("orders", 0, {id("d"), id("b"), id("c")});
  ASSERT_FALSE(moved.ok());
  EXPECT_EQ(moved.code(), idl::ErrorCode::INVALID_ARGUMENT);
  // A drained node started again is an added node: it serves.
  register_again("d");
  EXPECT_EQ(drain_state("d"), idl::DrainState::SERVING);
}

// The drained node holds the only copy of a sealed range whose records have
// not expired: refused, naming the range. A range other live members hold
// too is simply left.
TEST_F(Drain, SealedRangesItAloneHoldsAreRefusedSharedOnesAreLeft) {
  ASSERT_TRUE(controller_->create_channel(channel_config("solo", 1, 1)).ok());
  const auto solo_node = route("solo").replicas.front().node_id;
  std::string solo_name;
  for (const auto& [name, n] : nodes_) {
    if (n.id == solo_node) solo_name = name;
  }
  const std::string other = solo_name == "d" ? "e" : "d";
  nodes_[solo_name].broker->set_end_offset("solo", 0, 100);
  ASSERT_TRUE(controller_->move_partition("solo", 0, {id(other)}).ok());
  auto refused = controller_->drain_node(solo_node);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message.find("solo/0 [0, 100)"), std::string::npos) << refused.error().message;
  wall_ms_ += 60000;  // its records expired: nothing left to lose
  auto expired = controller_->drain_node(solo_node);
  ASSERT_TRUE(expired.ok()) << expired.error().describe();
  run_for(300ms);
  EXPECT_TRUE(route("solo").sealed.empty());
  EXPECT_EQ(controller_->metadata().nodes.at(solo_node).drain, idl::DrainState::DRAINED);
  wall_ms_ -= 60000;

  nodes_["a"].broker->set_end_offset("orders", 0, 500);
  ASSERT_TRUE(controller_->move_partition("orders", 0, {id(other), id("b"), id("c")}).ok());
  run_for(300ms);
  const auto before = route("orders");
  ASSERT_EQ(before.sealed.size(), 1u);
  auto started = controller_->drain_node(id("a"));
  ASSERT_TRUE(started.ok()) << started.error().describe();
  EXPECT_EQ(started->replicas, 0);
  EXPECT_EQ(started->sealed_ranges, 1);
  run_for(500ms);
  const auto r = route("orders");
  EXPECT_EQ(r.epoch, before.epoch + 1);
  EXPECT_EQ(chain_of(r), chain_of(before)) << "the chain is untouched";
  ASSERT_EQ(r.sealed.size(), 1u);
  EXPECT_EQ(r.sealed[0].end_offset, 500);
  Ids range;
  for (const auto& rep : r.sealed[0].replicas) range.push_back(rep.node_id);
  EXPECT_EQ(range, (Ids{id("b"), id("c")})) << "b and c still serve [0, 500)";
  EXPECT_EQ(drain_state("a"), idl::DrainState::DRAINED);
  EXPECT_TRUE(in_no_route("a"));
}

// A member that also holds a shared sealed range keeps both (and is not
// fenced) until its replacement is promoted, then leaves both at once.
TEST_F(Drain, AMemberKeepsItsSealedRangeUntilItsReplacementIsPromoted) {
  nodes_["a"].broker->set_end_offset("orders", 0, 500);
  ASSERT_TRUE(controller_->move_partition("orders", 0, {id("a"), id("b"), id("e")}).ok());
  run_for(300ms);
  const auto before = route("orders");
  nodes_["e"].broker->set_backlog("orders", 0, 64 << 20);
  ASSERT_TRUE(controller_->drain_node(id("a")).ok());
  run_for(500ms);
  auto r = route("orders");
  EXPECT_EQ(r.epoch, before.epoch + 1);
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("e")}));
  EXPECT_EQ(joining_of(r), (Ids{id("c")})) << "z3 and z1 are both free; c holds no chain (ids break the tie)";
  ASSERT_EQ(r.sealed.size(), 1u);
  EXPECT_EQ(r.sealed[0].replicas.size(), 3u) << "a still holds [0, 500)";
  EXPECT_TRUE(nodes_["a"].broker->fences().empty()) << "a still serves: no fence";
  nodes_["e"].broker->set_backlog("orders", 0, 0);
  run_for(500ms);
  r = route("orders");
  EXPECT_EQ(r.epoch, before.epoch + 2);
  EXPECT_EQ(chain_of(r), (Ids{id("b"), id("e"), id("c")}));
  ASSERT_EQ(r.sealed.size(), 1u);
  Ids range;
  for (const auto& rep : r.sealed[0].replicas) range.push_back(rep.node_id);
  EXPECT_EQ(range, (Ids{id("b"), id("c")}));
  EXPECT_EQ(drain_state("a"), idl::DrainState::DRAINED);
  EXPECT_TRUE(in_no_route("a"));
}

// --- a failure at each step ----------------------------------------------------

TEST_F(Drain, ReplacementThatDiesWhileCopyingIsReplacedByAnother) {
  add_node("f", "z1");
  nodes_["c"].broker->set_backlog("orders", 0, 64 << 20);
  ASSERT_TRUE(controller_->drain_node(id("a")).ok());
  run_for(300ms);
  ASSERT_EQ(joining_of(route("orders")), (Ids{id("d")}));
  kill_broker("d");
  run_for(2000ms, {"d"});
  ASSERT_EQ(state_of("d"), idl::NodeState::DEAD);
  auto r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("b"), id("c")})) << "a still serves";
  EXPECT_EQ(joining_of(r), (Ids{id("f")})) << "the other z1 node copies now";
  nodes_["c"].broker->set_backlog("orders", 0, 0);
  run_for(500ms, {"d"});
  r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("b"), id("c"), id("f")}));
  EXPECT_EQ(drain_state("a"), idl::DrainState::DRAINED);
  expect_settled(r);
}

TEST_F(Drain, DrainedNodeThatDiesMidDrainIsRepairedAndStaysOut) {
  nodes_["c"].broker->set_backlog("orders", 0, 64 << 20);
  ASSERT_TRUE(controller_->drain_node(id("b")).ok());
  run_for(300ms);
  ASSERT_EQ(joining_of(route("orders")), (Ids{id("e")}));
  kill_broker("b");
  run_for(2000ms, {"b"});
  ASSERT_EQ(state_of("b"), idl::NodeState::DEAD);
  auto r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("c")}));
  EXPECT_EQ(joining_of(r), (Ids{id("e")})) << "the replacement keeps copying, behind the same tail";
  nodes_["c"].broker->set_backlog("orders", 0, 0);
  run_for(500ms, {"b"});
  r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("a"), id("c"), id("e")}));
  expect_settled(r);
  // An empty process under its id comes back: still draining, so drained at once.
  register_again("b");
  run_for(300ms);
  EXPECT_EQ(drain_state("b"), idl::DrainState::DRAINED);
  EXPECT_TRUE(in_no_route("b"));
}

// Each step (the crash point) on each metadata store.
class DrainRestart : public Drain, public ::testing::WithParamInterface<std::tuple<const char*, Store>> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == Store::zk) ZK_METADATA_OR_SKIP(metadata_);
    Drain::SetUp();
  }
  static const char* step() { return std::get<0>(GetParam()); }
};

// The controller dies at each step of the drain; the one that opens the
// same metadata finishes it.
TEST_P(DrainRestart, ResumesFromTheMetadata) {
  crash_at_ = step();
  (void)controller_->drain_node(id("a"));  // fails at drain.begun, after the record
  for (int i = 0; i < 30 && !controller_->halted(); ++i) {
    clock_.advance(100ms);
    heartbeat_all_but();
    controller_->tick();
  }
  ASSERT_TRUE(controller_->halted()) << "never reached " << step();
  restart();
  EXPECT_NE(controller_->metadata().nodes.at(id("a")).drain, idl::DrainState::SERVING);
  run_for(1500ms);
  const auto r = route("orders");
  EXPECT_EQ(chain_of(r), (Ids{id("b"), id("c"), id("d")}));
  EXPECT_TRUE(r.joining.empty());
  EXPECT_EQ(drain_state("a"), idl::DrainState::DRAINED);
  EXPECT_TRUE(in_no_route("a"));
  expect_settled(r);
}

INSTANTIATE_TEST_SUITE_P(EveryStep, DrainRestart,
                         ::testing::Combine(::testing::Values("drain.begun", "repair.restored",
                                                              "repair.promoted", "drain.done"),
                                            ::testing::Values(Store::dir, Store::zk)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param);
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name + "_" + store_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace catena::control
