// The rebalance planner (rebalance_plan.hpp) as a pure function, then
// Controller::rebalance carrying a plan out with partition moves.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catena/control/controller_server.hpp>
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
  std::map<std::string, int> replicas, heads, tails;
};
Load load_after(const std::vector<RebalanceNode>& nodes, std::vector<RebalanceChain> chains,
                const std::vector<RebalanceMove>& plan) {
  for (const auto& m : plan) {
    auto& c = chains.at(static_cast<std::size_t>(m.partition));
    EXPECT_EQ(c.replicas, m.from) << "a move starts from the chain as it is";
    c.replicas = m.to;
  }
  Load l;
  for (const auto& n : nodes) l.replicas[n.node_id] = l.heads[n.node_id] = l.tails[n.node_id] = 0;
  for (const auto& c : chains) {
    EXPECT_EQ(std::set<std::string>(c.replicas.begin(), c.replicas.end()).size(), c.replicas.size())
        << "no node twice in a chain";
    for (const auto& r : c.replicas) ++l.replicas[r];
    ++l.heads[c.replicas.front()];
    ++l.tails[c.replicas.back()];
  }
  return l;
}

// The largest difference between two of `ids` in `count`.
int spread_of(const std::map<std::string, int>& count, const Ids& ids) {
  int lo = INT32_MAX;
  int hi = 0;
  for (const auto& id : ids) {
    lo = std::min(lo, count.at(id));
    hi = std::max(hi, count.at(id));
  }
  return hi - lo;
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

TEST(RebalancePlan, TailsAreEvenedOutByAMiddleMemberWithoutMovingHeads) {
  // Heads and replicas even; c is the tail of two chains, b of none.
  const std::vector<RebalanceNode> nodes{{"a", "z"}, {"b", "z"}, {"c", "z"}};
  const std::vector<RebalanceChain> chains{chain(0, {"a", "b", "c"}), chain(1, {"b", "a", "c"}),
                                           chain(2, {"c", "b", "a"})};
  const auto plan = plan_rebalance(nodes, chains);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].partition, 0);
  EXPECT_EQ(plan[0].to, (Ids{"a", "c", "b"})) << "b, in the middle, becomes the tail";
  EXPECT_NE(plan[0].reason.find("is the tail of 2 chains"), std::string::npos) << plan[0].reason;
  const auto l = load_after(nodes, chains, plan);
  EXPECT_EQ(l.heads, (std::map<std::string, int>{{"a", 1}, {"b", 1}, {"c", 1}}));
  EXPECT_EQ(l.tails, (std::map<std::string, int>{{"a", 1}, {"b", 1}, {"c", 1}}));
  // A chain of two has no middle: its tail only changes with its head.
  EXPECT_TRUE(plan_rebalance(nodes, {chain(0, {"a", "c"}), chain(1, {"b", "c"})}).empty());
}

TEST(RebalancePlan, TheRolesScopeReordersChainsAndNeverChangesTheirMembers) {
  // Every chain on a, b, c in one order, and d holding nothing: the full
  // plan gives d replicas (AnEmptyNodeAmongLoadedOnesTakesChainsAndHeads);
  // the roles scope only spreads heads and tails over a, b and c.
  const std::vector<RebalanceNode> nodes{{"a", "z"}, {"b", "z"}, {"c", "z"}, {"d", "z"}};
  std::vector<RebalanceChain> chains;
  for (int p = 0; p < 6; ++p) chains.push_back(chain(p, {"a", "b", "c"}));
  const auto plan = plan_rebalance(nodes, chains, RebalanceScope::roles);
  ASSERT_FALSE(plan.empty());
  for (const auto& m : plan) {
    EXPECT_TRUE(std::is_permutation(m.to.begin(), m.to.end(), m.from.begin(), m.from.end()))
        << m.partition << ": a member changed";
  }
  const auto l = load_after(nodes, chains, plan);
  EXPECT_EQ(l.replicas.at("d"), 0);
  EXPECT_EQ(l.heads, (std::map<std::string, int>{{"a", 2}, {"b", 2}, {"c", 2}, {"d", 0}}));
  EXPECT_EQ(l.tails, (std::map<std::string, int>{{"a", 2}, {"b", 2}, {"c", 2}, {"d", 0}}));
  // Balanced roles: nothing to do.
  std::vector<RebalanceChain> after = chains;
  for (const auto& m : plan) after.at(static_cast<std::size_t>(m.partition)).replicas = m.to;
  EXPECT_TRUE(plan_rebalance(nodes, after, RebalanceScope::roles).empty());
}

// The controller plans from its routes and carries the plan out as moves.
class Rebalance : public testing::ControllerFixture {
 protected:
  // Three chains over a, b, c, one head and one tail each; d joins and a
  // dies: every chain loses a and takes d behind its tail, so d is the tail
  // of all three and one of b, c heads two.
  void skew_roles_by_a_repair() {
    for (const char* n : {"a", "b", "c"}) add_node(n, "z");
    ASSERT_TRUE(controller_->create_channel(testing::channel_config("roles", 3, 3)).ok());
    run_for(std::chrono::milliseconds(300));
    add_node("d", "z");
    kill_broker("a");
    run_for(std::chrono::milliseconds(2000), {"a"});
    ASSERT_EQ(state_of("a"), idl::NodeState::DEAD);
    const auto l = roles();
    ASSERT_EQ(l.tails.at(id("d")), 3) << "the replacement is every chain's tail";
  }
  Load roles() {
    Load l;
    for (const char* n : {"b", "c", "d"}) l.replicas[id(n)] = l.heads[id(n)] = l.tails[id(n)] = 0;
    for (int p = 0; p < 3; ++p) {
      const auto chain = testing::chain_of(route("roles", p));
      EXPECT_FALSE(route("roles", p).__isset.joining && !route("roles", p).joining.empty()) << p;
      for (const auto& m : chain) ++l.replicas[m];
      ++l.heads[chain.front()];
      ++l.tails[chain.back()];
    }
    return l;
  }
  Ids live() { return {id("b"), id("c"), id("d")}; }
};

TEST_F(Rebalance, BalanceRolesEvensOutWhatARepairSkewedWithoutChangingMembers) {
  skew_roles_by_a_repair();
  std::vector<idl::PartitionRoute> before;
  for (int p = 0; p < 3; ++p) before.push_back(route("roles", p));

  auto plan = controller_->balance_roles();
  ASSERT_TRUE(plan.ok()) << plan.error().describe();
  EXPECT_FALSE(plan->dry_run);
  ASSERT_FALSE(plan->moves.empty());
  for (int p = 0; p < 3; ++p) {
    const auto was = testing::chain_of(before[static_cast<std::size_t>(p)]);
    const auto now = testing::chain_of(route("roles", p));
    EXPECT_TRUE(std::is_permutation(now.begin(), now.end(), was.begin(), was.end())) << p;
    const bool moved = std::any_of(plan->moves.begin(), plan->moves.end(),
                                   [p](const idl::PlannedMove& m) { return m.partition == p; });
    // A reordered chain is one handoff: one epoch on.
    EXPECT_EQ(route("roles", p).epoch, before[static_cast<std::size_t>(p)].epoch + (moved ? 1 : 0)) << p;
  }
  for (const auto& m : plan->moves) EXPECT_TRUE(m.error.empty()) << m.error;
  const auto l = roles();
  EXPECT_LE(spread_of(l.heads, live()), 1);
  EXPECT_LE(spread_of(l.tails, live()), 1);

  run_for(std::chrono::milliseconds(300), {"a"});
  auto again = controller_->balance_roles();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->moves.empty()) << "balanced now";
}

// The server's own thread runs it every role_balance_interval.
TEST_F(Rebalance, TheServerBalancesRolesEveryInterval) {
  skew_roles_by_a_repair();
  ControllerServer::Options so;
  so.thrift.port = 0;
  so.tick_interval = std::chrono::milliseconds(0);  // the test ticks
  so.role_balance_interval = std::chrono::milliseconds(20);
  ControllerServer server(*controller_, so);
  ASSERT_TRUE(server.start().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  Load l = roles();
  while ((spread_of(l.heads, live()) > 1 || spread_of(l.tails, live()) > 1) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    l = roles();
  }
  server.stop();
  EXPECT_LE(spread_of(l.heads, live()), 1);
  EXPECT_LE(spread_of(l.tails, live()), 1);
}

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
