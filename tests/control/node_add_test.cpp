// Adding a node (Controller::add_node: `catena node add`, catenad
// --join-rebalance): once the new node may take partitions, a rebalance
// hands it partition roles by tail-offset moves, and leaves every chain as
// consistent as before (full, zone spread kept, installed on its members,
// the old chain's history in a sealed range, no move left open). Refused,
// naming the node and its state, while it cannot take partitions.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "controller_fixture.hpp"
#include "test_support.hpp"

namespace catena::control::testing {
namespace {

class NodeAdd : public ControllerFixture {
 protected:
  static constexpr int kPartitions = 4;

  void SetUp() override {
    ControllerFixture::SetUp();
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
    ASSERT_TRUE(controller_->create_channel(channel_config("na", kPartitions, 3)).ok());
    run_for(std::chrono::milliseconds(300));  // every member acknowledges epoch 1
    for (int p = 0; p < kPartitions; ++p) {
      before_.push_back(route("na", p));
      // Each head has stored (and committed) records: a move seals them at
      // this offset and the old chain keeps [0, end) read-only.
      const auto head = before_.back().replicas.front().node_id;
      for (auto& [name, n] : nodes_) {
        if (n.id == head) n.broker->set_end_offset("na", p, 1000 + p);
      }
    }
  }

  int replicas_of(const std::string& node_id) {
    int held = 0;
    for (int p = 0; p < kPartitions; ++p) {
      const auto chain = chain_of(route("na", p));
      held += static_cast<int>(std::count(chain.begin(), chain.end(), node_id));
    }
    return held;
  }

  // Every chain full, on distinct ALIVE nodes in three zones, installed by
  // its members at its epoch; a moved one serves from the sealed offset and
  // keeps the old chain's history in one sealed range; no move is open.
  void expect_consistent() {
    std::map<std::string, std::string> zone_of;
    for (const auto& [name, n] : nodes_) zone_of[n.id] = n.zone;
    for (int p = 0; p < kPartitions; ++p) {
      SCOPED_TRACE("partition " + std::to_string(p));
      const auto r = route("na", p);
      const auto chain = chain_of(r);
      ASSERT_EQ(chain.size(), 3u);
      EXPECT_TRUE(r.joining.empty());
      EXPECT_EQ(std::set<std::string>(chain.begin(), chain.end()).size(), 3u) << "a node twice in a chain";
      std::set<std::string> zones;
      for (const auto& id : chain) zones.insert(zone_of.at(id));
      EXPECT_EQ(zones.size(), 3u) << "the zone spread is kept";
      for (const auto& [name, n] : nodes_) {
        if (std::find(chain.begin(), chain.end(), n.id) == chain.end()) continue;
        EXPECT_EQ(n.broker->installed("na", p).value_or(idl::PartitionRoute{}).epoch, r.epoch)
            << name << " runs the route it is in";
      }
      const auto& old = before_[static_cast<std::size_t>(p)];
      if (chain == chain_of(old)) {
        EXPECT_EQ(r.epoch, old.epoch) << "an unmoved chain is untouched";
        EXPECT_TRUE(r.sealed.empty());
        continue;
      }
      EXPECT_EQ(r.epoch, old.epoch + 1) << "one handoff";
      EXPECT_EQ(r.start_offset, 1000 + p) << "the new chain serves from the sealed head's end";
      ASSERT_EQ(r.sealed.size(), 1u);
      EXPECT_EQ(r.sealed[0].start_offset, 0);
      EXPECT_EQ(r.sealed[0].end_offset, 1000 + p);
      EXPECT_EQ(r.sealed[0].epoch, old.epoch);
      std::vector<std::string> sealed_chain;
      for (const auto& rep : r.sealed[0].replicas) sealed_chain.push_back(rep.node_id);
      EXPECT_EQ(sealed_chain, chain_of(old)) << "the old chain keeps the history: nothing is copied";
    }
    EXPECT_TRUE(controller_->metadata().moves.empty()) << "no move left open";
  }

  std::vector<idl::PartitionRoute> before_;
};

TEST_F(NodeAdd, TheJoiningNodeTakesRolesByHandoffAndEveryChainStaysConsistent) {
  add_node("d", "z1");  // z1: it may only take a's place in a chain
  auto plan = controller_->add_node(id("d"), /*dry_run=*/false);
  ASSERT_TRUE(plan.ok()) << plan.error().describe();
  EXPECT_FALSE(plan->dry_run);
  int onto_d = 0;
  for (const auto& m : plan->moves) {
    EXPECT_TRUE(m.error.empty()) << m.error;
    if (std::find(m.to.begin(), m.to.end(), id("d")) != m.to.end()) {
      ++onto_d;
      EXPECT_EQ(std::find(m.to.begin(), m.to.end(), id("a")), m.to.end()) << "d takes a's place";
    } else {
      // Evening out heads afterwards: the same members, another head.
      EXPECT_EQ(std::set<std::string>(m.to.begin(), m.to.end()),
                std::set<std::string>(m.current.begin(), m.current.end()));
      EXPECT_NE(m.to.front(), m.current.front());
    }
  }
  EXPECT_EQ(onto_d, 2) << "a holds 4 replicas, d none: two move over";
  EXPECT_EQ(replicas_of(id("d")), 2);
  EXPECT_EQ(replicas_of(id("a")), 2);
  expect_consistent();

  run_for(std::chrono::milliseconds(300));  // heartbeats and ticks change nothing more
  expect_consistent();
  auto again = controller_->add_node(id("d"), false);
  ASSERT_TRUE(again.ok()) << again.error().describe();
  EXPECT_TRUE(again->moves.empty()) << "balanced: a second join (a restart of d's agent) moves nothing";
}

TEST_F(NodeAdd, DryRunPlansTheSameMovesAndChangesNothing) {
  add_node("d", "z4");  // a zone of its own: it may take anyone's place
  auto dry = controller_->add_node(id("d"), /*dry_run=*/true);
  ASSERT_TRUE(dry.ok()) << dry.error().describe();
  EXPECT_TRUE(dry->dry_run);
  ASSERT_EQ(dry->moves.size(), 3u) << "12 replicas over 4 nodes: d takes one from each of a, b, c";
  for (int p = 0; p < kPartitions; ++p) EXPECT_EQ(route("na", p).epoch, before_[p].epoch);
  EXPECT_EQ(replicas_of(id("d")), 0);

  auto done = controller_->add_node(id("d"), false);
  ASSERT_TRUE(done.ok()) << done.error().describe();
  ASSERT_EQ(done->moves.size(), dry->moves.size());
  for (std::size_t i = 0; i < done->moves.size(); ++i) {
    EXPECT_EQ(done->moves[i].to, dry->moves[i].to);
    EXPECT_TRUE(done->moves[i].error.empty()) << done->moves[i].error;
  }
  EXPECT_EQ(replicas_of(id("d")), 3);
  for (const char* n : {"a", "b", "c"}) EXPECT_EQ(replicas_of(id(n)), 3) << n;
}

TEST_F(NodeAdd, RefusedNamingTheNodeAndItsStateWhileItCannotTakePartitions) {
  auto unknown = controller_->add_node("nobody", false);
  EXPECT_EQ(unknown.code(), idl::ErrorCode::UNKNOWN_NODE);
  EXPECT_NE(unknown.error().message.find("nobody"), std::string::npos) << unknown.error().message;

  add_node("d", "z1");
  // Silent, and its probes fail after it answered the early one (which would
  // otherwise make the first probe past the timeout its second failure).
  int d_pings = 0;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == InProcBrokerAdmin::Method::ping && call.to.node_id == id("d") && d_pings++ > 0) {
      return InProcBrokerAdmin::Fate::drop_request;
    }
    return InProcBrokerAdmin::Fate::deliver;
  });
  for (int i = 0; i < 30 && state_of("d") != idl::NodeState::SUSPECT; ++i) {
    run_for(std::chrono::milliseconds(100), {"d"});
  }
  ASSERT_EQ(state_of("d"), idl::NodeState::SUSPECT);
  auto suspect = controller_->add_node(id("d"), false);
  EXPECT_EQ(suspect.code(), idl::ErrorCode::UNAVAILABLE);
  EXPECT_NE(suspect.error().message.find(id("d")), std::string::npos) << suspect.error().message;
  EXPECT_NE(suspect.error().message.find("SUSPECT"), std::string::npos) << suspect.error().message;

  admin_.set_hook({});
  heartbeat("d");  // heard again: ALIVE, and it may join
  ASSERT_EQ(state_of("d"), idl::NodeState::ALIVE);
  ASSERT_TRUE(controller_->add_node(id("d"), /*dry_run=*/true).ok());

  kill_broker("d");
  for (int i = 0; i < 100 && state_of("d") != idl::NodeState::DEAD; ++i) {
    run_for(std::chrono::milliseconds(100), {"d"});
  }
  ASSERT_EQ(state_of("d"), idl::NodeState::DEAD);
  auto dead = controller_->add_node(id("d"), false);
  EXPECT_EQ(dead.code(), idl::ErrorCode::UNAVAILABLE);
  EXPECT_NE(dead.error().message.find("DEAD"), std::string::npos) << dead.error().message;

  add_node("e", "z2");
  ASSERT_TRUE(controller_->drain_node(id("e")).ok());
  auto draining = controller_->add_node(id("e"), false);
  EXPECT_EQ(draining.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(draining.error().message.find("DRAINING"), std::string::npos) << draining.error().message;
  for (int p = 0; p < kPartitions; ++p) EXPECT_EQ(route("na", p).epoch, before_[p].epoch) << "nothing moved";
}

}  // namespace
}  // namespace catena::control::testing
