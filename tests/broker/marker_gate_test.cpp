// The subscriber's MarkerGate on its own: which partitions park at a
// channel alter's marker, and when they go on.
#include "../../broker/client/src/marker_gate.hpp"

#include <gtest/gtest.h>

namespace catena::test {
namespace {

using client_detail::MarkerGate;

MarkerGate gate_of(const std::vector<std::uint32_t>& parts) {
  return MarkerGate(parts, std::vector<bool>(parts.size(), true));
}

TEST(MarkerGate, GrowParksAddedPartitionsUntilTheirParentReachesItsMarker) {
  MarkerGate g = gate_of({0, 1, 2, 3});
  const chain::MarkerSpec grow{1, 2, 4};
  g.on_marker(2, grow);  // partition 2 is fed by 0 (2 % gcd(2, 4))
  g.on_marker(3, grow);  // 3 by 1
  EXPECT_TRUE(g.parked(2));
  EXPECT_TRUE(g.parked(3));
  g.on_marker(0, grow);  // its own parent: never parked by itself
  EXPECT_FALSE(g.parked(0));
  EXPECT_FALSE(g.parked(2));
  EXPECT_TRUE(g.parked(3));
  g.on_marker(1, grow);
  EXPECT_FALSE(g.parked(1));
  EXPECT_FALSE(g.parked(3));
}

TEST(MarkerGate, ShrinkWaitsForEveryParentAndDoesNotHoldRemovedPartitions) {
  MarkerGate g = gate_of({0, 1, 2, 3});
  const chain::MarkerSpec shrink{1, 4, 3};  // gcd 1: every old partition feeds every new one
  g.on_marker(0, shrink);
  g.on_marker(1, shrink);
  g.on_marker(2, shrink);
  EXPECT_TRUE(g.parked(0));
  EXPECT_TRUE(g.parked(1));
  EXPECT_TRUE(g.parked(2));
  g.on_marker(3, shrink);
  EXPECT_FALSE(g.parked(0));
  EXPECT_FALSE(g.parked(1));
  EXPECT_FALSE(g.parked(2));
  EXPECT_FALSE(g.parked(3));  // removed: no key comes, only a later grow's marker
  // Growing back to 4: 3 is fed by 0, 1 and 2 (gcd 1), which it waits for.
  const chain::MarkerSpec regrow{2, 3, 4};
  g.on_marker(3, regrow);
  EXPECT_TRUE(g.parked(3));
  g.on_marker(0, regrow);
  g.on_marker(1, regrow);
  EXPECT_TRUE(g.parked(3));
  g.on_marker(2, regrow);
  EXPECT_FALSE(g.parked(3));
}

TEST(MarkerGate, PartitionsNotReadDoNotHoldBack) {
  // Reads partitions 2 and 3 only: their parents 0 and 1 are not here.
  MarkerGate g = gate_of({2, 3});
  g.on_marker(0, chain::MarkerSpec{1, 2, 4});
  EXPECT_FALSE(g.parked(0));
  // Reads 0 and 2 of a 4 -> 3 shrink: 2 waits for 0 only.
  MarkerGate h = gate_of({0, 2});
  h.on_marker(1, chain::MarkerSpec{1, 4, 3});
  EXPECT_TRUE(h.parked(1));
  h.on_marker(0, chain::MarkerSpec{1, 4, 3});
  EXPECT_FALSE(h.parked(1));
}

TEST(MarkerGate, TwoAltersInARow) {
  MarkerGate g = gate_of({0, 1, 2, 3});
  const chain::MarkerSpec grow{1, 2, 4};
  const chain::MarkerSpec shrink{2, 4, 3};
  // Partition 2 runs ahead through both generations' markers.
  g.on_marker(2, grow);
  EXPECT_TRUE(g.parked(2));
  g.on_marker(0, grow);
  EXPECT_FALSE(g.parked(2));
  g.on_marker(2, shrink);
  EXPECT_EQ(g.reached(2), 2u);
  EXPECT_TRUE(g.parked(2));  // waits for 0, 1 and 3 at generation 2
  g.on_marker(1, grow);
  g.on_marker(3, grow);
  EXPECT_FALSE(g.parked(3));  // 3's parent at generation 1 is 1
  EXPECT_TRUE(g.parked(2));
  g.on_marker(0, shrink);
  g.on_marker(1, shrink);
  EXPECT_TRUE(g.parked(2));
  EXPECT_TRUE(g.parked(0));
  g.on_marker(3, shrink);
  EXPECT_FALSE(g.parked(0));
  EXPECT_FALSE(g.parked(1));
  EXPECT_FALSE(g.parked(2));
  EXPECT_FALSE(g.parked(3));
}

TEST(MarkerGate, AnUntrackedParentDoesNotHoldBack) {
  // Partition 0 read from elsewhere than its start (Start::latest, say):
  // its generation is unknown, so partition 2 does not wait on it for ever.
  MarkerGate g({0, 1, 2, 3}, {false, true, true, true});
  const chain::MarkerSpec grow{1, 2, 4};
  const chain::MarkerSpec shrink{2, 4, 3};
  g.on_marker(2, grow);
  EXPECT_FALSE(g.parked(2));
  g.on_marker(0, grow);  // tracked from its first marker on
  g.on_marker(2, shrink);
  EXPECT_TRUE(g.parked(2));
  g.on_marker(1, grow);
  g.on_marker(1, shrink);
  g.on_marker(3, grow);
  g.on_marker(3, shrink);
  EXPECT_TRUE(g.parked(2));  // 0 is at generation 1
  g.jumped(0, false);        // a seek: its generation is unknown again
  EXPECT_EQ(g.reached(0), 0u);
  EXPECT_FALSE(g.parked(2));
  EXPECT_FALSE(g.parked(0));
}

// A group member's subscriber reads one partition: the coordinator
// releases each marker (release()), the gate cannot see the parents.
TEST(MarkerGate, ReleasedByCallerHoldsAtEveryMarkerUntilReleasedAndNeverGoesBack) {
  MarkerGate g({2}, {true}, /*released_by_caller=*/true);
  EXPECT_FALSE(g.parked(0));
  g.on_marker(0, chain::MarkerSpec{1, 2, 4});
  EXPECT_TRUE(g.parked(0)) << "its parent 0 is not read here: the caller decides";
  g.release(0, 1);
  EXPECT_FALSE(g.parked(0));
  g.release(0, 0);  // an older answer
  EXPECT_FALSE(g.parked(0)) << "a release never goes back";
  g.on_marker(0, chain::MarkerSpec{3, 4, 6});
  EXPECT_TRUE(g.parked(0));
  g.release(0, 2);
  EXPECT_TRUE(g.parked(0)) << "released up to 2, standing at 3";
  g.release(0, 5);  // released ahead of the marker (another member read the parents first)
  EXPECT_FALSE(g.parked(0));
  g.on_marker(0, chain::MarkerSpec{4, 6, 5});
  EXPECT_FALSE(g.parked(0)) << "already released";
  g.on_marker(0, chain::MarkerSpec{6, 5, 2});
  EXPECT_FALSE(g.parked(0)) << "removed by that shrink: nothing to hold back";
}

}  // namespace
}  // namespace catena::test
