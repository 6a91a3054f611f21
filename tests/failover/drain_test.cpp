// Draining a node end to end (issue 11 part 2), with real processes
// (failover_fixture.hpp: five brokers, channel "f" with R=3, a publisher and
// two live subscribers): the head of the chain is drained while traffic
// flows, is in no route afterwards, and is then killed with SIGKILL; every
// acknowledged record is still read back once, in order, at its offset.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "failover_fixture.hpp"

namespace catena::testing {
namespace {

TEST_F(Failover, DrainTheHeadUnderTrafficThenKillIt) {
  std::string drained;
  std::int64_t replacement_bytes = -1;
  run_with_fault([&] {
    const int head = node_at(0);
    ASSERT_GE(head, 0);
    drained = cluster_->nodes()[static_cast<std::size_t>(head)].node_id;
    const auto before = admin_->get_route("f", 0, 0);
    ASSERT_TRUE(before.ok());
    const auto started = Clock::now();
    auto r = admin_->drain_node(drained);
    ASSERT_TRUE(r.ok()) << r.error().describe();
    EXPECT_EQ(r->drain, control::idl::DrainState::DRAINING);
    EXPECT_EQ(r->replicas, 1);
    auto again = admin_->drain_node(drained);
    EXPECT_EQ(again.code(), control::idl::ErrorCode::INVALID_ARGUMENT) << "a drain is already running";
    ASSERT_TRUE(wait_for(
        [&] {
          auto s = status_of(drained);
          return s && s->drain == control::idl::DrainState::DRAINED;
        },
        30s, "the head drained"));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);

    auto after = admin_->get_route("f", 0, 0);
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(after->replicas.size(), 3u);
    EXPECT_TRUE(after->joining.empty());
    for (const auto& rep : after->replicas)
      EXPECT_NE(rep.node_id, drained) << "the drained node is in no route";
    EXPECT_EQ(after->replicas[0].node_id, before->replicas[1].node_id) << "its successor is the head now";
    EXPECT_EQ(after->replicas[1].node_id, before->replicas[2].node_id);
    EXPECT_EQ(after->start_offset, before->start_offset) << "offsets do not change";
    const auto status = status_of(drained);
    ASSERT_TRUE(status.has_value());
    EXPECT_EQ(status->replicas, 0);
    EXPECT_EQ(status->state, control::idl::NodeState::ALIVE);
    // What a node holds comes with its heartbeats: the replacement's first
    // one after its copy may come a moment after the drain.
    for (const auto until = std::chrono::steady_clock::now() + 2s;
         replacement_bytes <= 0 && std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(20ms)) {
      if (auto s = status_of(after->replicas[2].node_id)) replacement_bytes = s->stats.bytes;
    }
    std::printf("drained %s in %lld ms; the replacement %s holds %lld bytes\n", drained.c_str(),
                static_cast<long long>(took.count()), after->replicas[2].node_id.c_str(),
                static_cast<long long>(replacement_bytes));
    RecordProperty("drain_ms", static_cast<int>(took.count()));
    // Stopped the hard way: nothing may depend on it any more.
    ASSERT_TRUE(cluster_->signal_node(static_cast<std::size_t>(head), SIGKILL));
  });
  EXPECT_GT(replacement_bytes, 0) << "the replacement copied the partition";
  expect_offsets_follow_publishing();
  expect_fresh_reader_sees_every_ack();
}

}  // namespace
}  // namespace catena::testing
