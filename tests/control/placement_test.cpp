// Placement: distinct nodes, zone spread before load, least loaded first.
#include <gtest/gtest.h>
#include <set>

#include <catena/control/placement.hpp>

namespace catena::control {
namespace {

PlacementCandidate node(std::string id, std::string zone, std::int64_t replicas = 0,
                        std::int64_t segments = 0, std::int64_t bytes = 0, std::string datacenter = {}) {
  return {std::move(id), std::move(zone), replicas, segments, bytes, std::move(datacenter)};
}

// A node in zone (its datacenter is the zone's first letter: a1 -> "a").
PlacementCandidate in_zone(std::string id, const std::string& zone, std::int64_t replicas = 0) {
  return node(std::move(id), zone, replicas, 0, 0, zone.substr(0, 1));
}

std::vector<std::string> choose(Placement& p, int count, std::vector<std::string> zones = {},
                                std::set<std::string> exclude = {}) {
  auto r = p.choose(count, std::move(zones), exclude);
  EXPECT_TRUE(r.ok()) << r.error().describe();
  return r.ok() ? *r : std::vector<std::string>{};
}

TEST(Placement, LeastLoadedFirstAndHeadIsTheFirstPick) {
  Placement p({node("a", "z1", 5), node("b", "z2", 1), node("c", "z3", 3), node("d", "z4", 0, 10),
               node("e", "z5", 0, 2)});
  // e and d both hold no replicas; e has fewer segments.
  EXPECT_EQ(choose(p, 3), (std::vector<std::string>{"e", "d", "b"}));
}

TEST(Placement, LoadTieBreaksOnSegmentsThenBytesThenId) {
  Placement p({node("c", "z1", 1, 1, 50), node("b", "z2", 1, 1, 10), node("a", "z3", 1, 1, 10)});
  EXPECT_EQ(choose(p, 3), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(Placement, SpreadsZonesBeforeBalancingLoad) {
  // The three z1 nodes are idle, but a chain takes at most one of them while
  // z2 and z3 have nodes.
  Placement p({node("a1", "z1"), node("a2", "z1"), node("a3", "z1"), node("b", "z2", 9), node("c", "z3", 7)});
  const auto chain = choose(p, 3);
  EXPECT_EQ(chain, (std::vector<std::string>{"a1", "c", "b"}));
}

TEST(Placement, SharesAZoneOnlyWhenNoOtherZoneHasANode) {
  Placement p({node("a1", "z1"), node("a2", "z1", 1), node("b", "z2", 4)});
  const auto chain = choose(p, 3);
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0], "a1");
  EXPECT_EQ(chain[1], "b");  // the other zone first, despite its load
  EXPECT_EQ(chain[2], "a2");
}

TEST(Placement, ReplacementAvoidsTheZonesTheChainAlreadyUses) {
  Placement p({node("d", "z1"), node("e", "z2", 3), node("x", "z3", 1)});
  // Members are in z1 and z3 (x is one of them): only e adds a new zone.
  EXPECT_EQ(choose(p, 1, {"z1", "z3"}, {"x"}), (std::vector<std::string>{"e"}));
}

TEST(Placement, NeverPicksAnExcludedOrAlreadyChosenNode) {
  Placement p({node("a", "z1"), node("b", "z1"), node("c", "z1"), node("d", "z1")});
  const auto chain = choose(p, 3, {}, {"a"});
  EXPECT_EQ(std::set<std::string>(chain.begin(), chain.end()).size(), 3u);
  EXPECT_EQ(std::count(chain.begin(), chain.end(), "a"), 0);
}

TEST(Placement, NotEnoughNodes) {
  Placement p({node("a", "z1"), node("b", "z2")});
  auto r = p.choose(3, {}, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::NOT_ENOUGH_NODES);
  auto excluded = p.choose(2, {}, {"a"});
  EXPECT_EQ(excluded.code(), idl::ErrorCode::NOT_ENOUGH_NODES);
}

TEST(Placement, SpreadsPartitionsOfOneChannelAcrossNodes) {
  Placement p(
      {node("a", "z1"), node("b", "z2"), node("c", "z3"), node("d", "z1"), node("e", "z2"), node("f", "z3")});
  const auto first = choose(p, 3);
  const auto second = choose(p, 3);
  std::set<std::string> all(first.begin(), first.end());
  all.insert(second.begin(), second.end());
  EXPECT_EQ(all.size(), 6u) << "the second chain should use the three idle nodes";
  for (const auto& c : p.candidates()) EXPECT_EQ(c.replicas, 1) << c.node_id;
}

// A repair's preference (rule 3): the lost member's zone, then the chain's
// datacenter, then anywhere; all after zone spread, all before load.
TEST(Placement, RepairPrefersTheLostZoneThenTheChainsDatacenterThenAnywhere) {
  const PlacementPreference lost_a1{{"a1"}, {"a"}};  // lost a1, the rest of the chain is in a2
  {
    // An a1 spare replaces the a1 member, though it is the most loaded.
    Placement p({in_zone("x", "a1", 5), in_zone("y", "a3"), in_zone("z", "b1")});
    EXPECT_EQ(*p.choose(1, {"a2"}, {}, lost_a1), (std::vector<std::string>{"x"}));
  }
  {
    // Zone a1 is gone: another zone of datacenter a, though b1's node is idler.
    Placement p({in_zone("y", "a3", 4), in_zone("z", "b1")});
    EXPECT_EQ(*p.choose(1, {"a2"}, {}, lost_a1), (std::vector<std::string>{"y"}));
  }
  {
    // Datacenter a has no node in a zone the chain does not use: zone spread
    // first, so b1, not a second replica in a2.
    Placement p({in_zone("w", "a2"), in_zone("z", "b1", 4)});
    EXPECT_EQ(*p.choose(1, {"a2"}, {}, lost_a1), (std::vector<std::string>{"z"}));
  }
  {
    // Without a preference (a chain being created) only spread and load count.
    Placement p({in_zone("x", "a1", 5), in_zone("y", "a3", 1), in_zone("z", "b1")});
    EXPECT_EQ(*p.choose(1, {"a2"}, {}), (std::vector<std::string>{"z"}));
  }
}

}  // namespace
}  // namespace catena::control
