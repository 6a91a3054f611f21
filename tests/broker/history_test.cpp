// The history checker must catch every kind of violation it claims to: feed
// it correct and deliberately broken histories.
#include <gtest/gtest.h>
#include <string>

#include <catena/broker/history.hpp>

namespace catena {
namespace {

std::span<const std::byte> b(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Two subscribers, three records acknowledged at offsets 0..2 of partition 0.
void base(HistoryChecker& h) {
  for (std::uint64_t id = 1; id <= 3; ++id) {
    h.published(id, b("p" + std::to_string(id)));
    h.acknowledged(id, 0, id - 1);
  }
}

void deliver_all(HistoryChecker& h, int sub) {
  for (std::uint64_t id = 1; id <= 3; ++id) h.delivered(sub, 0, id - 1, id, b("p" + std::to_string(id)));
}

TEST(HistoryChecker, CorrectHistoryPasses) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  deliver_all(h, 1);
  auto r = h.check();
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_EQ(r.acknowledged, 3u);
  EXPECT_EQ(r.delivered, 6u);
}

TEST(HistoryChecker, MissingDeliveryIsLost) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  h.delivered(1, 0, 0, 1, b("p1"));
  h.delivered(1, 0, 2, 3, b("p3"));
  auto r = h.check();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.lost, 1u) << r.summary();
}

TEST(HistoryChecker, RepeatedDeliveryIsDuplicateAndOutOfOrder) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  deliver_all(h, 1);
  h.delivered(1, 0, 2, 3, b("p3"));
  auto r = h.check();
  EXPECT_EQ(r.duplicated, 1u) << r.summary();
  EXPECT_EQ(r.out_of_order, 1u);
}

TEST(HistoryChecker, ReorderedDeliveryIsCaught) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  h.delivered(1, 0, 1, 2, b("p2"));
  h.delivered(1, 0, 0, 1, b("p1"));
  h.delivered(1, 0, 2, 3, b("p3"));
  EXPECT_EQ(h.check().out_of_order, 1u);
}

TEST(HistoryChecker, ChangedPayloadIsCorrupted) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  h.delivered(1, 0, 0, 1, b("p1"));
  h.delivered(1, 0, 1, 2, b("pX"));
  h.delivered(1, 0, 2, 3, b("p3"));
  EXPECT_EQ(h.check().corrupted, 1u);
}

TEST(HistoryChecker, NeverPublishedIsPhantom) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  deliver_all(h, 1);
  h.delivered(0, 0, 3, 99, b("ghost"));
  EXPECT_EQ(h.check().phantom, 1u);
}

TEST(HistoryChecker, ReusedOffsetIsConflict) {
  HistoryChecker h(2);
  base(h);
  h.published(4, b("p4"));
  h.acknowledged(4, 0, 1);  // offset 1 already belongs to record 2
  deliver_all(h, 0);
  deliver_all(h, 1);
  EXPECT_GE(h.check().offset_conflicts, 1u);
}

TEST(HistoryChecker, DeliveredAtAnotherOffsetThanAcknowledgedIsConflict) {
  HistoryChecker h(2);
  base(h);
  deliver_all(h, 0);
  h.delivered(1, 0, 0, 1, b("p1"));
  h.delivered(1, 0, 1, 2, b("p2"));
  h.delivered(1, 0, 5, 3, b("p3"));
  EXPECT_GE(h.check().offset_conflicts, 1u);
}

TEST(HistoryChecker, FailedPublishMayBeDeliveredOnceButNeedNotBe) {
  HistoryChecker h(2);
  base(h);
  h.published(4, b("p4"));
  h.failed(4);
  deliver_all(h, 0);
  deliver_all(h, 1);
  h.delivered(0, 0, 3, 4, b("p4"));  // its ack was lost; delivered to one subscriber only
  auto r = h.check();
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_EQ(r.failed, 1u);
}

// A data_lost notice excuses exactly the range it names, for the subscriber
// that got it: records outside it, or at the other subscriber, still count.
TEST(HistoryChecker, DeclaredLossExcusesOnlyItsRangeAndSubscriber) {
  HistoryChecker h(2);
  base(h);
  h.delivered(0, 0, 0, 1, b("p1"));  // subscriber 0 got offset 0, then was told 1..2 are gone
  h.declare_lost(0, 0, 1, 3);
  deliver_all(h, 1);
  auto r = h.check();
  EXPECT_TRUE(r.ok()) << r.summary();
  EXPECT_EQ(r.declared_lost, 2u);

  HistoryChecker narrow(1);
  base(narrow);
  narrow.declare_lost(0, 0, 1, 2);  // only offset 1
  auto n = narrow.check();
  EXPECT_EQ(n.lost, 2u) << n.summary();  // offsets 0 and 2
  EXPECT_EQ(n.declared_lost, 1u);
}

}  // namespace
}  // namespace catena
