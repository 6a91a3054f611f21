// The verbs endpoint's work-queue ring (verbs_endpoint.hpp), without a
// device: with selective signalling one completion completes every request
// before it, an unsignalled request that fails and a flush still complete
// one by one, and requests never handed to the NIC complete after the rest.
#include <gtest/gtest.h>
#include <vector>

#include "verbs/verbs_endpoint.hpp"

namespace catena::fabric::verbs {
namespace {

std::vector<std::uint64_t> pop_all_done(WrRing& ring) {
  std::vector<std::uint64_t> ids;
  while (ring.has_done()) ids.push_back(ring.pop_done().wr_id);
  return ids;
}

TEST(VerbsWrRing, ASignalledCompletionCompletesTheUnsignalledBeforeIt) {
  WrRing ring(8);
  for (std::uint64_t i = 0; i < 5; ++i) ring.push(100 + i, Opcode::write, true);
  EXPECT_EQ(ring.in_hardware(), 5u);
  EXPECT_FALSE(ring.has_done());
  ring.complete_through(4).status = WcStatus::success;
  EXPECT_EQ(ring.in_hardware(), 0u);
  std::vector<WcStatus> statuses;
  std::vector<std::uint64_t> ids;
  while (ring.has_done()) {
    const WrRing::Slot& s = ring.pop_done();
    ids.push_back(s.wr_id);
    statuses.push_back(s.status);
  }
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{100, 101, 102, 103, 104}));
  EXPECT_EQ(statuses, std::vector<WcStatus>(5, WcStatus::success));
  EXPECT_TRUE(ring.empty());
}

TEST(VerbsWrRing, AFailedUnsignalledRequestAndTheFlushAfterItCompleteOneByOne) {
  WrRing ring(8);
  for (std::uint64_t i = 0; i < 5; ++i) ring.push(i, Opcode::write, true);
  // The NIC reports request 2's error, then flushes 3 and 4 (a flush
  // completion for each, signalled or not).
  ring.complete_through(2).status = WcStatus::remote_access_error;
  ring.complete_through(3).status = WcStatus::flushed;
  ring.complete_through(4).status = WcStatus::flushed;
  std::vector<WcStatus> statuses;
  while (ring.has_done()) statuses.push_back(ring.pop_done().status);
  EXPECT_EQ(statuses,
            (std::vector<WcStatus>{WcStatus::success, WcStatus::success, WcStatus::remote_access_error,
                                   WcStatus::flushed, WcStatus::flushed}));
}

TEST(VerbsWrRing, RequestsTheNicNeverTookCompleteAfterThoseItDid) {
  WrRing ring(8);
  for (std::uint64_t i = 0; i < 4; ++i) ring.push(i, Opcode::write, true);
  ring.unpost_last(2);                // a held batch whose last two the NIC refused
  ring.push(4, Opcode::send, false);  // posted after the endpoint left the connected state
  EXPECT_EQ(ring.in_hardware(), 2u);
  EXPECT_FALSE(ring.has_unposted()) << "the NIC still owes requests 0 and 1";
  ring.complete_through(1).status = WcStatus::flushed;
  EXPECT_EQ(pop_all_done(ring), (std::vector<std::uint64_t>{0, 1}));
  std::vector<std::uint64_t> unposted;
  while (ring.has_unposted()) unposted.push_back(ring.pop_unposted().wr_id);
  EXPECT_EQ(unposted, (std::vector<std::uint64_t>{2, 3, 4}));
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.in_hardware(), 0u);
}

TEST(VerbsWrRing, ACompletionTheRingDoesNotOweChangesNothing) {
  WrRing ring(4);
  ring.push(7, Opcode::write, true);
  ring.complete_through(0).status = WcStatus::success;
  ring.complete_through(0).status = WcStatus::general_error;  // again: not owed
  ring.complete_through(5).status = WcStatus::general_error;  // never posted
  EXPECT_EQ(pop_all_done(ring), (std::vector<std::uint64_t>{7}));
  EXPECT_TRUE(ring.empty());
}

TEST(VerbsWrRing, HeldRequestsCountTowardTheDepthAcrossManyLaps) {
  WrRing ring(4);
  std::uint64_t next = 0;
  std::uint64_t expect = 0;
  for (int lap = 0; lap < 100; ++lap) {
    while (!ring.full()) ring.push(next++, Opcode::write, true);
    EXPECT_EQ(ring.in_hardware(), 4u);
    // Only the last of each batch of 4 is signalled.
    ring.complete_through(ring.next_seq() - 1).status = WcStatus::success;
    for (std::uint64_t id : pop_all_done(ring)) EXPECT_EQ(id, expect++);
  }
  EXPECT_EQ(expect, 400u);
}

}  // namespace
}  // namespace catena::fabric::verbs
