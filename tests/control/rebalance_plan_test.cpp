// The rebalance planner (rebalance_plan.hpp) as a pure function, then
// Controller::rebalance carrying a plan out with partition moves.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <catena/control/rebalance_plan.hpp>

#include "controller_fixture.hpp"
#include "test_support.hpp"

namespace catena::control {
namespace {

using Ids = std::vector<std::string>;

RebalanceChain chain(int partition, Ids replicas) {
  return RebalanceChain{"ch", partition, std::move(replicas)};
}

// Replica and head counts after the plan is applied to chains.
struct Load {
  std::map<std::string, int> replicas, heads;
};
Load load_after(const std::vector<RebalanceNode>& nodes, std::vector<RebalanceChain> chains,
                const std::vector<RebalanceMove>& plan) {
  for (const auto& m : plan) {
    auto& c = chains.at(static_cast<std::size_t>(m.partition));
    EXPECT_EQ(c.replicas, m.from) << "a move starts from the chain as it is";
    c.replicas = m.to;
  }
  Load l;
  for (const auto& n : nodes) l.replicas[n.node_id] = l.heads[n.node_id] = 0;
  for (const auto& c : chains) {
    EXPECT_EQ(std::set<std::string>(c.replicas.begin(), c.replicas.end()).size(), c.replicas.size())
        << "no node twice in a chain";
    for (const auto& r : c.replicas) ++l.replicas[r];
    ++l.heads[c.replicas.front()];
  }
  return l;
}

int spread(const std::map<std::string, std::string>& zone, const Ids& replicas) {
  std::set<std::string> zones;
  for (const auto& r : replicas) zones.insert(zone.at(r));
  return static_cast<int>(zones.size());
}

TEST(RebalancePlan, BalancedInputGivesAnEmptyPlan) {
  const std::vector<RebalanceNode> nodes{{"a", "z1"}, {"b", "z2"}, {"c", "z3"}};
  const std::vector<RebalanceChain> chains{chain(0, {"a", "b", "c"}), chain(1, {"b", "c", "a"}),
                                           chain(2, {"c", "a", "b"})};
  EXPECT_TRUE(plan_rebalance(nodes, chains).empty());
  EXPECT_TRUE(plan_rebalance(nodes, {}).empty());
}

TEST(RebalancePlan, AnEmptyNodeAmongLoadedOnesTakesChainsAndHeads) {
  const std::vector<RebalanceNode> nodes{{"a", "z"}, {"b", "z"}, {"c", "z"}, {"d", "z"}};
  std::vector<RebalanceChain> chains;
  for (int p = 0; p < 4; ++p) chains.push_back(chain(p, {"a", "b", "c"}));
  const auto plan = plan_rebalance(nodes, chains);
  ASSERT_FALSE(plan.empty());
  for (const auto& m : plan) {
    EXPECT_NE(std::find(m.to.begin(), m.to.end(), "d"), m.to.end()) << "every move is onto d";
    EXPECT_FALSE(m.reason.empty());
  }
  const auto l = load_after(nodes, chains, plan);
  EXPECT_EQ(l.replicas, (std::map<std::string, int>{{"a", 3}, {"b", 3}, {"c", 3}, {"d", 3}}));
  EXPECT_EQ(l.heads, (std::map<std::string, int>{{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}}));
}

TEST(RebalancePlan, AnEmptyNodeTakesAChainOnceItIsTwoBehind) {
  // Two chains over three nodes: each holds 2, the new node 0. It takes one
  // (preferably a head: the node it relieves heads one); then every node is
  // within one of the others, and one chain is all it gets.
  const std::vector<RebalanceNode> nodes{{"a", "z"}, {"b", "z"}, {"c", "z"}, {"d", "z"}};
  const std::vector<RebalanceChain> chains{chain(0, {"a", "b", "c"}), chain(1, {"b", "c", "a"})};
  const auto plan = plan_rebalance(nodes, chains);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].partition, 0);
  EXPECT_EQ(plan[0].to, (Ids{"d", "b", "c"})) << "d takes a's place, as the head";
  const auto l = load_after(nodes, chains, plan);
  EXPECT_EQ(l.replicas.at("d"), 1);
  EXPECT_EQ(l.heads.at("d"), 1);
  // One chain over three nodes: each holds 1, within one of the new node's
  // 0: nothing to even out.
  EXPECT_TRUE(plan_rebalance(nodes, {chain(0, {"a", "b", "c"})}).empty());
}

TEST(RebalancePlan, ZoneSpreadIsKept) {
  // d joins zone z1: it may only take a's place (b's or c's would put two
  // replicas of a chain in z1).
  const std::vector<RebalanceNode> nodes{{"a", "z1"}, {"b", "z2"}, {"c", "z3"}, {"d", "z1"}};
  const std::map<std::string, std::string> zone{{"a", "z1"}, {"b", "z2"}, {"c", "z3"}, {"d", "z1"}};
  std::vector<RebalanceChain> chains;
  for (int p = 0; p < 4; ++p) chains.push_back(chain(p, {"a", "b", "c"}));
  const auto plan = plan_rebalance(nodes, chains);
  ASSERT_FALSE(plan.empty());
  for (const auto& m : plan) EXPECT_EQ(spread(zone, m.to), 3) << m.channel << "/" << m.partition;
  const auto l = load_after(nodes, chains, plan);
  EXPECT_EQ(l.replicas.at("a"), 2);
  EXPECT_EQ(l.replicas.at("d"), 2);
  EXPECT_EQ(l.replicas.at("b"), 4) << "no z2 node to share with";
}

TEST(RebalancePlan, IneligibleNodesTakeNothingAndKeepTheirChains) {
  const std::vector<RebalanceNode> nodes{{"a", "z"}, {"b", "z"}, {"c", "z"}, {"d", "z", false}, {"e", "z"}};
  std::vector<RebalanceChain> chains{chain(0, {"a", "b", "d"}), chain(1, {"a", "b", "d"}),
                                     chain(2, {"a", "c", "d"})};
  const auto plan = plan_rebalance(nodes, chains);
  for (const auto& m : plan) {
    EXPECT_NE(std::find(m.to.begin(), m.to.end(), "d"), m.to.end()) << "d is not relieved by a rebalance";
  }
  const auto l = load_after(nodes, chains, plan);
  EXPECT_LE(l.replicas.at("a") - l.replicas.at("e"), 1);
}

// The controller plans from its routes and carries the plan out as moves.
class Rebalance : public testing::ControllerFixture {};

TEST_F(Rebalance, ANewNodeTakesPartitionsByHandoffAndDryRunChangesNothing) {
  for (const char* n : {"a", "b", "c"}) add_node(n, "z");
  ASSERT_TRUE(controller_->create_channel(testing::channel_config("rb", 4, 3)).ok());
  run_for(std::chrono::milliseconds(300));
  add_node("d", "z");

  auto dry = controller_->rebalance(true);
  ASSERT_TRUE(dry.ok()) << dry.error().describe();
  EXPECT_TRUE(dry->dry_run);
  ASSERT_EQ(dry->moves.size(), 3u);  // d takes one replica from each of a, b, c (12 -> 3 each)
  for (int p = 0; p < 4; ++p) EXPECT_EQ(route("rb", p).epoch, 1) << "a dry run moves nothing";

  auto done = controller_->rebalance(false);
  ASSERT_TRUE(done.ok()) << done.error().describe();
  ASSERT_EQ(done->moves.size(), 3u);
  std::map<std::string, int> held;
  for (const auto& m : done->moves) {
    EXPECT_TRUE(m.error.empty()) << m.error;
    const auto r = route("rb", m.partition);
    EXPECT_EQ(testing::chain_of(r), m.to);
    EXPECT_EQ(r.epoch, 2) << "one handoff";
  }
  for (int p = 0; p < 4; ++p) {
    for (const auto& id : testing::chain_of(route("rb", p))) ++held[id];
  }
  EXPECT_EQ(held[id("d")], 3);
  run_for(std::chrono::milliseconds(300));
  auto again = controller_->rebalance(true);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->moves.empty()) << "balanced now";
}

}  // namespace
}  // namespace catena::control
