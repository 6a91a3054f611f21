// Brokers' leases while a metadata change waits for ZooKeeper. A change
// (a create, a repair) waits for ZooKeeper under the controller's lock;
// a broker's heartbeat must not wait behind it (its lease would lapse and
// its chains stop acknowledging), except the heartbeat of a node that is
// being evicted: that one is never renewed.
#include <chrono>
#include <future>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catena/control/controller_client.hpp>
#include <catena/control/controller_server.hpp>

#include "controller_fixture.hpp"
#include "zk_server.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::channel_config;

class LeasesOnZooKeeper : public testing::ControllerFixture {
 protected:
  void SetUp() override {
    std::string why;
    zk_ = testing::ZkServer::start(&why);
    ZK_OR_SKIP(zk_.get(), why);
    metadata_ = zk_->uri(testing::unique_chroot("leases"));
    ControllerFixture::SetUp();
    add_node("a", "z1");
    add_node("b", "z2");
    add_node("c", "z3");
    add_node("d", "z1");
  }
  void TearDown() override {
    if (zk_) zk_->resume();
    controller_.reset();  // before its server goes
  }

  // A heartbeat of `name` sent on a thread of its own.
  std::future<Result<idl::HeartbeatReply>> heartbeat_async(const std::string& name) {
    const auto& n = nodes_.at(name);
    idl::HeartbeatRequest req;
    req.__set_node_id(n.id);
    req.__set_node_epoch(n.epoch);
    req.__set_stats(n.broker->report());
    return std::async(std::launch::async, [this, req] { return controller_->heartbeat(req); });
  }

  std::unique_ptr<testing::ZkServer> zk_;
};

// The create waits for ZooKeeper; every broker's heartbeat is answered
// (renewing its lease) meanwhile, and so is a failure report; what the
// heartbeats reported is the controller's once the create is done, and the
// report has the suspect probed.
TEST_F(LeasesOnZooKeeper, AChangeWaitingForZooKeeperHoldsUpNoHeartbeat) {
  zk_->pause();
  auto create = std::async(std::launch::async,
                           [this] { return controller_->create_channel(channel_config("late", 4, 3)); });
  std::this_thread::sleep_for(200ms);  // the create is waiting for ZooKeeper
  ASSERT_EQ(create.wait_for(0ms), std::future_status::timeout) << "the create did not wait for ZooKeeper";
  idl::NodeStats stats;
  stats.__set_segments(7);
  stats.__set_bytes(4242);
  nodes_.at("b").broker->set_stats(stats);
  for (const char* name : {"a", "b", "c", "d"}) {
    auto beat = heartbeat_async(name);
    ASSERT_EQ(beat.wait_for(3s), std::future_status::ready)
        << name << "'s heartbeat waited for the stopped ZooKeeper";
    auto r = beat.get();
    ASSERT_TRUE(r.ok()) << r.error().describe();
    EXPECT_FALSE(r->fenced) << name;
  }
  // A failure report (a broker sends its reports from the thread that
  // heartbeats) is taken without waiting too, and acted on afterwards.
  idl::FailureReport report;
  report.__set_reporter(id("a"));
  report.__set_suspect_node_id(id("d"));
  report.__set_reason("connection reset");
  auto reported = std::async(std::launch::async, [&] { return controller_->report_failure(report); });
  ASSERT_EQ(reported.wait_for(3s), std::future_status::ready) << "a failure report waited for ZooKeeper";
  EXPECT_TRUE(reported.get().ok());
  const int pings_before = nodes_.at("d").broker->pings();
  EXPECT_EQ(create.wait_for(0ms), std::future_status::timeout);
  zk_->resume();
  ASSERT_EQ(create.wait_for(15s), std::future_status::ready);
  auto created = create.get();
  ASSERT_TRUE(created.ok()) << created.error().describe();
  EXPECT_EQ(route("late", 3).replicas.size(), 3u);
  controller_->tick();
  auto status = controller_->cluster_status();
  ASSERT_TRUE(status.ok()) << status.error().describe();
  bool found = false;
  for (const auto& s : status->nodes) {
    if (s.info.node_id != id("b")) continue;
    found = true;
    EXPECT_EQ(s.stats.segments, 7) << "the stats of a heartbeat answered during the create were lost";
    EXPECT_EQ(s.stats.bytes, 4242);
  }
  EXPECT_TRUE(found);
  EXPECT_GT(nodes_.at("d").broker->pings(), pings_before) << "the queued report did not have d probed";
  EXPECT_EQ(state_of("d"), idl::NodeState::ALIVE) << "d answered its probe";
}

// c falls silent and fails its probes: its eviction waits for ZooKeeper.
// The others are renewed meanwhile; c is not (its chains are being given to
// others: a renewed lease would let it acknowledge beside them), and once
// the eviction is written c's heartbeat is answered `fenced`.
TEST_F(LeasesOnZooKeeper, ANodeBeingEvictedIsNotRenewedWhileTheEvictionWaits) {
  ASSERT_TRUE(controller_->create_channel(channel_config("c", 4, 3)).ok());
  kill_broker("c");
  zk_->pause();
  auto ticks = std::async(std::launch::async, [&] {
    // The detector's time, with the others heartbeating: c is suspected at
    // 500 ms, fails two probes and is evicted (a commit that waits).
    for (int i = 0; i < 30; ++i) {
      clock_.advance(100ms);
      for (const char* name : {"a", "b", "d"}) {
        idl::HeartbeatRequest req;
        req.__set_node_id(nodes_.at(name).id);
        req.__set_node_epoch(nodes_.at(name).epoch);
        (void)controller_->heartbeat(req);
      }
      controller_->tick();
    }
  });
  ASSERT_EQ(ticks.wait_for(2s), std::future_status::timeout) << "the eviction did not wait for ZooKeeper";
  auto a = heartbeat_async("a");
  ASSERT_EQ(a.wait_for(3s), std::future_status::ready) << "a's heartbeat waited for the stopped ZooKeeper";
  ASSERT_TRUE(a.get().ok());
  auto c = heartbeat_async("c");
  if (c.wait_for(500ms) == std::future_status::ready) {
    auto r = c.get();
    ASSERT_FALSE(r.ok() && !r->fenced) << "c's lease was renewed while its eviction waited";
  }
  zk_->resume();
  ASSERT_EQ(ticks.wait_for(20s), std::future_status::ready);
  if (c.valid()) {
    ASSERT_EQ(c.wait_for(5s), std::future_status::ready);
    auto r = c.get();
    ASSERT_TRUE(r.ok()) << r.error().describe();
    EXPECT_TRUE(r->fenced) << "c's heartbeat after its eviction";
  }
  EXPECT_EQ(state_of("c"), idl::NodeState::DEAD);
  auto again = heartbeat_async("c").get();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->fenced);
}

// Over Thrift: calls that wait behind the change (here route lookups, as
// new publishers and their stall checks make) each hold one of the
// server's threads. They used to take all 16, and a broker's heartbeat then
// found none and waited for ZooKeeper too. At most 12 wait now (the
// server's threads less 4); the calls past that are answered UNAVAILABLE at
// once, and a heartbeat finds a thread.
TEST_F(LeasesOnZooKeeper, CallsWaitingBehindAChangeLeaveThreadsForHeartbeats) {
  ASSERT_TRUE(controller_->create_channel(channel_config("c", 2, 3)).ok());
  ControllerServer::Options so;
  so.thrift.port = 0;
  so.tick_interval = 0ms;
  so.role_balance_interval = 0ms;
  ControllerServer server(*controller_, so);
  ASSERT_TRUE(server.start().ok());
  ControllerClient::Options co;
  co.address = server.address();
  co.rpc_timeout = 20s;

  zk_->pause();
  auto create = std::async(std::launch::async, [co] {
    ControllerClient client(co);
    return client.create_channel(channel_config("late", 2, 3));
  });
  std::this_thread::sleep_for(200ms);
  std::vector<std::future<Result<idl::PartitionRoute>>> lookups;
  for (int i = 0; i < 24; ++i) {
    lookups.push_back(std::async(std::launch::async, [co, i] {
      ControllerClient client(co);
      return client.get_route("c", i % 2, 0);
    }));
  }
  std::this_thread::sleep_for(500ms);  // every lookup is in (waiting or answered)
  ControllerClient::Options bo = co;
  bo.rpc_timeout = 3s;
  ControllerClient broker(bo);
  idl::HeartbeatRequest hb;
  hb.__set_node_id(id("a"));
  hb.__set_node_epoch(nodes_.at("a").epoch);
  const auto sent = std::chrono::steady_clock::now();
  auto beat = broker.heartbeat(hb);
  const auto took = std::chrono::steady_clock::now() - sent;
  ASSERT_TRUE(beat.ok()) << "the heartbeat found no thread free: " << beat.error().describe();
  EXPECT_FALSE(beat->fenced);
  EXPECT_LT(took, 1s);
  int refused = 0;
  for (auto& l : lookups) {
    if (l.wait_for(0ms) != std::future_status::ready) continue;
    auto r = l.get();
    ASSERT_FALSE(r.ok()) << "a lookup answered while the change waited for ZooKeeper";
    EXPECT_EQ(r.error().code, idl::ErrorCode::UNAVAILABLE) << r.error().describe();
    ++refused;
  }
  EXPECT_GE(refused, 24 - 11) << "more than 11 lookups (and the create) held threads";
  zk_->resume();
  for (auto& l : lookups) {
    if (!l.valid()) continue;
    auto r = l.get();
    EXPECT_TRUE(r.ok()) << "a lookup that waited: " << r.error().describe();
  }
  auto created = create.get();
  EXPECT_TRUE(created.ok()) << created.error().describe();
}

}  // namespace
}  // namespace catena::control
