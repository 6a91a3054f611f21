// Failure detection with a ManualClock: timeouts, probes, reports, fencing.
#include <gtest/gtest.h>

#include "controller_fixture.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using Fate = InProcBrokerAdmin::Fate;
using Method = InProcBrokerAdmin::Method;

class Detector : public testing::ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
  }

  // A report from `reporter` that `suspect` failed on partition 0 of
  // `channel` at its current route epoch.
  idl::FailureReport report_about(const std::string& suspect, const std::string& channel,
                                  const std::string& reporter, const std::string& reason) {
    idl::FailureReport report;
    report.__set_reporter(reporter);
    report.__set_suspect_node_id(id(suspect));
    report.__set_channel(channel);
    report.__set_partition(0);
    report.__set_epoch(route(channel).epoch);
    report.__set_reason(reason);
    return report;
  }
};

// A silent node is probed once at half the timeout; that probe failing
// counts toward the verdict, so the second failed probe (right at the
// timeout) evicts it: about one probe timeout after the heartbeat timeout.
TEST_F(Detector, SilentUnreachableNodeGoesSuspectThenDead) {
  kill_broker("c");
  run_for(200ms, {"c"});  // under half the timeout: not probed yet
  EXPECT_EQ(nodes_["c"].broker->pings(), 0);
  run_for(300ms, {"c"});  // exactly the timeout: probed early, not yet overdue
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  clock_.advance(1ms);
  heartbeat_all_but({"c"});
  controller_->tick();  // overdue -> SUSPECT, and its second failed probe -> DEAD
  EXPECT_EQ(state_of("c"), idl::NodeState::DEAD);
  EXPECT_EQ(state_of("a"), idl::NodeState::ALIVE);
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE);
}

// The early probe alone never evicts: its failure is forgotten when a
// heartbeat arrives, and the next silence starts counting from zero.
TEST_F(Detector, AHeartbeatForgetsAFailedEarlyProbe) {
  int pings = 0;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == Method::ping && call.to.node_id == id("c") && pings++ == 0) return Fate::drop_request;
    return Fate::deliver;
  });
  run_for(400ms, {"c"});  // the early probe (at 300 ms) is lost
  EXPECT_EQ(pings, 1);
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  run_for(100ms);         // c heartbeats again
  run_for(600ms, {"c"});  // a new silence past the timeout: two answered probes
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  EXPECT_GE(pings, 3);
}

// An early probe that fails only once the node is overdue (it waited out a
// long timeout) is followed by the next probe at once, in the same tick:
// the dead verdict does not wait a tick more.
TEST_F(Detector, AnEarlyProbeThatFailsPastTheTimeoutIsFollowedAtOnce) {
  int pings = 0;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method != Method::ping || call.to.node_id != id("c")) return Fate::deliver;
    if (pings++ == 0) clock_.advance(250ms);  // the early probe times out late
    return Fate::drop_request;
  });
  run_for(300ms, {"c"});  // the tick at 300 ms sends the early probe; it ends at 550 ms
  EXPECT_EQ(pings, 2);
  EXPECT_EQ(state_of("c"), idl::NodeState::DEAD);
}

// A node that answers its early probe is probed from scratch once it is
// overdue: probe_attempts failures after the timeout, as without it.
TEST_F(Detector, AnAnsweredEarlyProbeDoesNotCountAgainstTheNode) {
  int pings = 0;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == Method::ping && call.to.node_id == id("c") && pings++ > 0) return Fate::drop_request;
    return Fate::deliver;
  });
  run_for(500ms, {"c"});  // the early probe answered
  EXPECT_EQ(pings, 1);
  clock_.advance(1ms);
  heartbeat_all_but({"c"});
  controller_->tick();  // overdue: SUSPECT, one failed probe
  EXPECT_EQ(state_of("c"), idl::NodeState::SUSPECT);
  controller_->tick();  // the second
  EXPECT_EQ(state_of("c"), idl::NodeState::DEAD);
}

TEST_F(Detector, HeartbeatClearsATimeoutSuspicion) {
  // c answers its early probe, then every probe is lost: SUSPECT at 600 ms.
  int pings = 0;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == Method::ping && call.to.node_id == id("c") && pings++ > 0) return Fate::drop_request;
    return Fate::deliver;
  });
  run_for(600ms, {"c"});
  EXPECT_EQ(state_of("c"), idl::NodeState::SUSPECT);
  heartbeat("c");
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  run_for(300ms);
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
}

TEST_F(Detector, ProbeSavesASilentButHealthyNode) {
  // c's heartbeats are lost, but it answers the controller's probes: for a
  // while (heartbeat_loss, 4x the timeout) that is a hiccup; past it, c is
  // evicted (Repair.NodeThatAnswersProbesButWhoseHeartbeatsNeverArriveIsEvicted).
  run_for(1500ms, {"c"});
  EXPECT_NE(state_of("c"), idl::NodeState::DEAD);
  EXPECT_GT(nodes_["c"].broker->pings(), 0);
}

TEST_F(Detector, OneLostProbeIsNotEnough) {
  int pings = 0;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    if (call.method == Method::ping && call.to.node_id == id("c") && pings++ == 0) return Fate::drop_request;
    return Fate::deliver;
  });
  run_for(1000ms, {"c"});
  EXPECT_NE(state_of("c"), idl::NodeState::DEAD);
  EXPECT_GE(pings, 2);
}

TEST_F(Detector, FlakyClientReportsDoNotEvictAHealthyNode) {
  ASSERT_TRUE(controller_->create_channel(testing::channel_config("ch")).ok());
  const auto before = route("ch");
  const auto report = report_about("b", "ch", "flaky-client", "read timed out");
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(controller_->report_failure(report).ok());
    run_for(100ms);
  }
  EXPECT_EQ(state_of("b"), idl::NodeState::ALIVE);
  EXPECT_GE(nodes_["b"].broker->pings(), 1);
  EXPECT_EQ(route("ch"), before) << "no reconfiguration for a node that answers its probes";
}

// A report cuts the heartbeat timeout short, but not the lease: b may still
// be acknowledging as head or tail until lease (250 ms) after its last
// heartbeat, so its dead verdict waits until lease + heartbeat_interval
// (350 ms) have passed, still well before the 500 ms timeout.
TEST_F(Detector, ReportAboutAnUnreachableNodeEvictsItOnceItsLeaseLapsed) {
  // Cut off, not gone: every call to it is lost (a timeout), none refused.
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return call.to.node_id == id("b") ? Fate::drop_request : Fate::deliver;
  });
  idl::FailureReport report;
  report.__set_reporter("node-1");
  report.__set_suspect_node_id(id("b"));
  report.__set_reason("successor unreachable");
  ASSERT_TRUE(controller_->report_failure(report).ok());
  EXPECT_EQ(state_of("b"), idl::NodeState::SUSPECT);
  controller_->tick();
  controller_->tick();
  EXPECT_EQ(state_of("b"), idl::NodeState::SUSPECT) << "evicted while its lease may be valid";
  run_for(300ms, {"b"});
  EXPECT_EQ(state_of("b"), idl::NodeState::SUSPECT) << "evicted 300 ms after its last heartbeat";
  run_for(100ms, {"b"});
  EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
}

// A crash: a peer reports b, and b's admin address refuses connections
// (nothing listens: the process is gone). That is evidence enough: b is
// evicted at the first failed probe, without waiting out its lease, and its
// chains are repaired in the same tick.
TEST_F(Detector, ReportedNodeWhoseAddressRefusesConnectionsIsEvictedAtTheFirstProbe) {
  ASSERT_TRUE(controller_->create_channel(testing::channel_config("ch")).ok());
  const auto before = route("ch");
  kill_broker("b");
  ASSERT_TRUE(
      controller_->report_failure(report_about("b", "ch", "publisher", "connection to head lost")).ok());
  EXPECT_EQ(state_of("b"), idl::NodeState::SUSPECT);
  controller_->tick();  // no time passes: well inside b's lease
  EXPECT_EQ(state_of("b"), idl::NodeState::DEAD);
  const auto after = route("ch");
  EXPECT_GT(after.epoch, before.epoch);
  for (const auto& r : after.replicas) EXPECT_NE(r.node_id, id("b"));
  EXPECT_EQ(after.replicas.size(), before.replicas.size() - 1);
}

// Refused connections without a peer's report (only missed heartbeats)
// still take every probe: SilentUnreachableNodeGoesSuspectThenDead. And a
// report about a node that answers its probes evicts nobody:
// FlakyClientReportsDoNotEvictAHealthyNode.

TEST_F(Detector, ReportsAreCheckedAgainstTheRoute) {
  ASSERT_TRUE(controller_->create_channel(testing::channel_config("ch")).ok());
  idl::FailureReport report;
  report.__set_reporter("client");
  report.__set_suspect_node_id("node-99");
  EXPECT_EQ(controller_->report_failure(report).code(), idl::ErrorCode::UNKNOWN_NODE);
  report.__set_suspect_node_id(id("a"));
  report.__set_channel("nope");
  EXPECT_EQ(controller_->report_failure(report).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  report.__set_channel("ch");
  report.__set_epoch(0);
  auto stale = controller_->report_failure(report);
  ASSERT_EQ(stale.code(), idl::ErrorCode::STALE_EPOCH);
  ASSERT_TRUE(stale.error().current_route.has_value());
  EXPECT_EQ(*stale.error().current_route, route("ch"));
  EXPECT_EQ(state_of("a"), idl::NodeState::ALIVE) << "a stale report triggers nothing";
}

TEST_F(Detector, DeadNodeIsFencedUntilItRegistersAgain) {
  kill_broker("c");
  const auto old_epoch = nodes_["c"].epoch;
  run_for(800ms, {"c"});
  ASSERT_EQ(state_of("c"), idl::NodeState::DEAD);

  idl::HeartbeatRequest hb;
  hb.__set_node_id(id("c"));
  hb.__set_node_epoch(old_epoch);
  for (int i = 0; i < 3; ++i) {
    auto r = controller_->heartbeat(hb);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->fenced);
    run_for(100ms, {"c"});
  }
  EXPECT_EQ(state_of("c"), idl::NodeState::DEAD) << "heartbeats from a fenced epoch do not revive it";

  // It restarts and registers again under its id: a fresh incarnation.
  auto& again = add_node("c", "z3", id("c"));
  EXPECT_GT(again.epoch, old_epoch);
  EXPECT_EQ(state_of("c"), idl::NodeState::ALIVE);
  heartbeat("c");
  auto r = controller_->heartbeat(hb);  // the old incarnation stays fenced
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->fenced);
  auto status = controller_->cluster_status();
  ASSERT_TRUE(status.ok());
  for (const auto& s : status->nodes) {
    if (s.info.node_id == id("c")) {
      EXPECT_EQ(s.replicas, 0);
    }
  }
}

TEST_F(Detector, HeartbeatFromAnUnknownNode) {
  idl::HeartbeatRequest hb;
  hb.__set_node_id("node-42");
  hb.__set_node_epoch(1);
  EXPECT_EQ(controller_->heartbeat(hb).code(), idl::ErrorCode::UNKNOWN_NODE);
}

TEST_F(Detector, StatusReportsHeartbeatAgeAndStats) {
  idl::HeartbeatRequest hb;
  hb.__set_node_id(id("a"));
  hb.__set_node_epoch(nodes_["a"].epoch);
  hb.stats.__set_segments(4);
  hb.stats.__set_bytes(4096);
  ASSERT_TRUE(controller_->heartbeat(hb).ok());
  clock_.advance(250ms);
  auto status = controller_->cluster_status();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->nodes.size(), 3u);
  for (const auto& s : status->nodes) {
    if (s.info.node_id != id("a")) continue;
    EXPECT_EQ(s.last_heartbeat_ms_ago, 250);
    EXPECT_EQ(s.stats.segments, 4);
    EXPECT_EQ(s.stats.bytes, 4096);
  }
}

}  // namespace
}  // namespace catena::control
