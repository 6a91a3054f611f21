// NodeAgent, the node's conversation with the controller, run against an
// in-process Controller whose pushes reach a real Broker through its real
// BrokerAdmin server (Thrift on loopback): registration, heartbeats renewing
// the lease, and a `fenced` answer suspending the node and registering it
// again with what it holds.
#include <chrono>
#include <functional>
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <catena/broker/broker.hpp>
#include <catena/broker/broker_admin_server.hpp>
#include <catena/broker/controller_routes.hpp>
#include <catena/broker/node_agent.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/control/controller.hpp>
#include <catena/control/thrift_broker_admin.hpp>
#include <catena/fabric/clock.hpp>

#include "../control/test_support.hpp"
#include "../test_env.hpp"

namespace catena {
namespace {

using namespace std::chrono_literals;
using test::bytes;
using test::provider_spec;

constexpr const char* kChannel = "agent";
constexpr std::int64_t kSegment = 1 << 20;
constexpr auto kLease = 30s;  // outlasts the test: acks stop only where the agent stops them

// The in-process Controller as the node sees it, recording every
// registration and what the agent had done to its lease by then.
class RecordingCalls final : public broker::ControllerCalls {
 public:
  struct Registration {
    std::vector<control::idl::PartitionProgress> held;
    std::uint64_t lease_deadline_ns = 0;
  };

  explicit RecordingCalls(control::Controller& controller) : inner_(controller) {}
  void watch(const broker::NodeAgent* agent) { agent_ = agent; }

  control::Result<control::idl::RegisterReply> register_node(
      const control::idl::NodeInfo& info, const std::vector<control::idl::PartitionProgress>& held) override {
    registrations.push_back({held, agent_ != nullptr ? agent_->lease_deadline_ns() : 0});
    auto r = inner_.register_node(info, held);
    if (r) last_registration = *r;
    return r;
  }
  control::Result<control::idl::HeartbeatReply> heartbeat(
      const control::idl::HeartbeatRequest& request) override {
    ++heartbeats;
    return inner_.heartbeat(request);
  }
  control::Result<void> report_failure(const control::idl::FailureReport& report) override {
    return inner_.report_failure(report);
  }

  std::vector<Registration> registrations;
  control::idl::RegisterReply last_registration;
  int heartbeats = 0;

 private:
  broker::ControllerCallsOf<control::Controller> inner_;
  const broker::NodeAgent* agent_ = nullptr;
};

class NodeAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    control::Controller::Options o;
    o.data_dir = dir_.path() / "meta";
    o.heartbeat_interval = 100ms;
    o.heartbeat_timeout = 2 * kLease;
    o.lease = kLease;
    auto c = control::Controller::open(o, controller_clock_, admin_);
    ASSERT_TRUE(c.ok()) << c.error().describe();
    controller_ = std::move(*c);
    calls_ = std::make_unique<RecordingCalls>(*controller_);

    broker::BrokerConfig cfg;
    cfg.node_id = "node-a";
    cfg.provider = provider_spec();
    cfg.fabric_listen = test::listen_address();
    cfg.slot_count = 4;
    auto b = broker::Broker::start(cfg);
    ASSERT_TRUE(b.ok()) << b.error().message;
    broker_ = std::move(b.value());
    // As catenad: only the controller that registered the node may call.
    broker::BrokerAdminServer::Options so;
    so.fence = &fence_;
    admin_server_ = std::make_unique<broker::BrokerAdminServer>(*broker_, so);
    ASSERT_TRUE(admin_server_->start().ok());

    info_.node_id = "node-a";
    info_.admin_addr = "127.0.0.1:" + std::to_string(admin_server_->port());
    info_.fabric_addr = broker_->fabric_address();
    info_.zone = "z1";
    broker::NodeAgent::Options ao;
    ao.info = info_;
    ao.controller = "in-process";
    ao.provider = provider_spec();
    ao.fence = &fence_;
    agent_ = std::make_unique<broker::NodeAgent>(*broker_, *calls_, ao);
    calls_->watch(agent_.get());
  }

  void TearDown() override {
    if (admin_server_) admin_server_->stop();
    if (broker_) broker_->stop();
  }

  static std::uint64_t now_ns() { return catena::SteadyClock::instance().now_ns(); }
  static constexpr std::uint64_t kLeaseNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kLease).count();

  static bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (cond()) return true;
      std::this_thread::sleep_for(5ms);
    }
    return cond();
  }

  std::uint64_t broker_epoch_of_partition() const {
    auto st = broker_->stats();
    return st.partitions.empty() ? 0 : st.partitions[0].epoch;
  }

  // Publishes one record on the controller's current route; true once acknowledged within `timeout`.
  bool publish_one(std::chrono::milliseconds timeout) {
    auto route = controller_->get_route(kChannel, 0, 0);
    EXPECT_TRUE(route.ok()) << route.error().describe();
    if (!route.ok()) return false;
    // As the controller's Thrift answer gives it: with the access secret.
    route->__set_access_secret(controller_->access_secret(kChannel, 0));
    StaticRoutes routes;
    routes.set(broker::ControllerRoutes::to_route(*route), 1, static_cast<std::uint32_t>(kSegment));
    PublisherOptions po;
    po.provider = provider_spec();
    auto pub = Publisher::create(routes, kChannel, po);
    if (!pub.ok()) return false;
    bool acked = false;
    auto e = pub.value()->publish_to(0, bytes(std::string("record")),
                                     [&](const PublishResult& r) { acked = r.status == PublishStatus::ok; });
    if (e != client::ErrorCode::ok) return false;
    return pub.value()->flush(timeout) && acked;
  }

  // A BrokerAdmin caller other than the controller: what it reaches the
  // node with, and whether it holds the partition as the controller left it.
  control::BrokerTarget target(const std::string& secret, std::int64_t controller_epoch) const {
    control::BrokerTarget t;
    t.node_id = info_.node_id;
    t.admin_addr = info_.admin_addr;
    t.admin_secret = secret;
    t.controller_epoch = controller_epoch;
    return t;
  }
  void create_channel() {
    control::idl::ChannelConfig cc;
    cc.__set_name(kChannel);
    cc.__set_partitions(1);
    cc.__set_replication(1);
    cc.__set_segment_bytes(kSegment);
    cc.__set_ttl_ms(600000);
    auto ch = controller_->create_channel(cc);
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    ASSERT_TRUE(eventually([&] { return broker_epoch_of_partition() > 0; }))
        << "the controller's push never arrived";
  }

  broker::ControllerFence fence_;
  control::testing::TempDir dir_;
  catena::ManualClock controller_clock_;
  control::ThriftBrokerAdmin admin_{control::ThriftBrokerAdmin::Options{}};
  std::unique_ptr<control::Controller> controller_;
  std::unique_ptr<RecordingCalls> calls_;
  std::unique_ptr<broker::Broker> broker_;
  std::unique_ptr<broker::BrokerAdminServer> admin_server_;
  control::idl::NodeInfo info_;
  std::unique_ptr<broker::NodeAgent> agent_;
};

// The node's log says when records wait at a replica, and why, from its
// counters: once when they start growing, then at most once a minute.
TEST(HeldBackLog, SaysWhyRecordsWaitAtMostOnceAMinutePerPartition) {
  auto counters = std::make_shared<chain::ReplicaCounters>();
  broker::NodeStats st;
  broker::PartitionStats p;
  p.channel = "orders";
  p.partition = 2;
  p.position = 0;
  p.chain_length = 3;
  p.counters = counters;
  st.partitions.push_back(p);
  broker::HeldBackLog log;
  constexpr std::uint64_t kS = 1'000'000'000ull;
  std::uint64_t now = 1000 * kS;
  EXPECT_TRUE(log.lines(st, now).empty());  // nothing held back
  chain::ReplicaCounters::add(counters->log_full_events, 3);
  auto lines = log.lines(st, now += kS);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("orders/2 (head, chain of 3): records held back: the partition's log is full"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[0].find("segment memory"), std::string::npos) << lines[0];
  chain::ReplicaCounters::add(counters->log_full_events, 1);
  EXPECT_TRUE(log.lines(st, now += 30 * kS).empty());  // told 30 s ago
  EXPECT_TRUE(log.lines(st, now += 29 * kS).empty());
  chain::ReplicaCounters::add(counters->segment_memory_refusals, 1);
  lines = log.lines(st, now += 2 * kS);  // 61 s after: both reasons since it was told
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("log is full"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("segment memory is spent"), std::string::npos) << lines[0];
  EXPECT_TRUE(log.lines(st, now += 300 * kS).empty());  // nothing new: quiet
  chain::ReplicaCounters::add(counters->rate_limited_events, 1);
  lines = log.lines(st, now += kS);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("publish rate"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("log is full"), std::string::npos) << lines[0];
}

TEST_F(NodeAgentTest, RegistersAndHeartbeatsRenewTheLeaseFromTheirSendTime) {
  const std::uint64_t before = now_ns();
  ASSERT_TRUE(agent_->register_node());
  const std::uint64_t after = now_ns();
  EXPECT_EQ(agent_->node_id(), "node-a");
  EXPECT_GT(agent_->node_epoch(), 0);
  EXPECT_EQ(broker_->node_epoch(), static_cast<std::uint64_t>(agent_->node_epoch()));
  EXPECT_EQ(agent_->interval(), 100ms);
  EXPECT_GE(agent_->lease_deadline_ns(), before + kLeaseNs);
  EXPECT_LE(agent_->lease_deadline_ns(), after + kLeaseNs);

  for (int i = 0; i < 3; ++i) {
    const std::uint64_t previous = agent_->lease_deadline_ns();
    std::this_thread::sleep_for(2ms);
    const std::uint64_t sent_after = now_ns();
    agent_->step();
    EXPECT_GT(agent_->lease_deadline_ns(), previous) << "heartbeat " << i;
    EXPECT_GE(agent_->lease_deadline_ns(), sent_after + kLeaseNs) << "heartbeat " << i;
    EXPECT_LE(agent_->lease_deadline_ns(), now_ns() + kLeaseNs) << "heartbeat " << i;
  }
  EXPECT_EQ(calls_->heartbeats, 3);
  EXPECT_EQ(calls_->registrations.size(), 1u);
}

TEST_F(NodeAgentTest, FencedSuspendsAndRegistersAgainWithWhatItHolds) {
  ASSERT_TRUE(agent_->register_node());
  const std::int64_t first_epoch = agent_->node_epoch();
  ASSERT_NO_FATAL_FAILURE(create_channel());
  const std::uint64_t first_route_epoch = broker_epoch_of_partition();
  ASSERT_TRUE(publish_one(10s));
  agent_->step();
  ASSERT_EQ(agent_->node_epoch(), first_epoch) << "an ordinary heartbeat keeps the incarnation";

  // Another incarnation takes the node id: the agent's is retired, and its
  // next heartbeat is answered `fenced`.
  auto other = controller_->register_node(info_, {});
  ASSERT_TRUE(other.ok()) << other.error().describe();
  agent_->step();

  ASSERT_EQ(calls_->registrations.size(), 2u);
  const auto& again = calls_->registrations.back();
  EXPECT_EQ(again.lease_deadline_ns, 0u) << "the lease was withdrawn before registering again";
  ASSERT_EQ(again.held.size(), 1u);
  EXPECT_EQ(again.held[0].channel, kChannel);
  EXPECT_EQ(again.held[0].partition, 0);
  EXPECT_GE(again.held[0].epoch, static_cast<std::int64_t>(first_route_epoch));
  EXPECT_GT(agent_->node_epoch(), other->node_epoch);
  EXPECT_EQ(broker_->node_epoch(), static_cast<std::uint64_t>(agent_->node_epoch()));
  EXPECT_GT(agent_->lease_deadline_ns(), 0u) << "registered again: a new lease";

  // It held the last copy: the controller puts it back at a newer epoch,
  // naming the new incarnation, and the suspended replica resumes.
  ASSERT_TRUE(eventually([&] {
    controller_clock_.advance(200ms);  // pushes a broker refused are retried by tick()
    controller_->tick();
    return broker_epoch_of_partition() > first_route_epoch;
  }));
  EXPECT_TRUE(publish_one(10s));
}

TEST_F(NodeAgentTest, UnknownNodeRegistersAgain) {
  // A controller that lost the node (its metadata says nothing of this id)
  // answers UNKNOWN_NODE; the agent registers again.
  broker::NodeAgent::Options ao;
  ao.info = info_;
  ao.info.node_id = "node-b";
  ao.info.admin_addr = "127.0.0.1:1";
  ao.controller = "in-process";
  ao.provider = provider_spec();
  broker::NodeAgent stranger(*broker_, *calls_, ao);
  stranger.step();
  ASSERT_EQ(calls_->registrations.size(), 1u);
  EXPECT_TRUE(calls_->registrations[0].held.empty());
  EXPECT_EQ(stranger.node_id(), "node-b");
  EXPECT_GT(stranger.node_epoch(), 0);
}

// Issue 13: "the admin API of brokers accepts only the controller". Anyone
// who can reach the BrokerAdmin port can otherwise fence a partition, drop
// it with a route that leaves the node out, or seal its head.
TEST_F(NodeAgentTest, OnlyTheControllerThatRegisteredTheNodeMayCallItsBrokerAdmin) {
  ASSERT_TRUE(agent_->register_node());
  const auto& reg = calls_->last_registration;
  ASSERT_TRUE(reg.__isset.admin_secret);
  ASSERT_EQ(reg.admin_secret.size(), 16u);
  ASSERT_TRUE(reg.__isset.controller_epoch);
  ASSERT_GT(reg.controller_epoch, 0);
  ASSERT_NO_FATAL_FAILURE(create_channel());
  const std::uint64_t route_epoch = broker_epoch_of_partition();

  control::ThriftBrokerAdmin intruder{control::ThriftBrokerAdmin::Options{}};
  std::string forged = reg.admin_secret;
  forged[0] = static_cast<char>(forged[0] ^ 1);
  for (const auto& secret : {std::string(), forged, std::string(16, '\0')}) {
    // An empty secret sends no authenticate call: the calls come bare.
    const auto to = target(secret, reg.controller_epoch + 1);
    auto ping = intruder.ping(to);
    EXPECT_EQ(ping.code(), control::idl::ErrorCode::UNAUTHENTICATED) << ping.error().describe();
    auto fenced = intruder.fence(to, kChannel, 0, static_cast<std::int64_t>(route_epoch) + 100);
    EXPECT_EQ(fenced.code(), control::idl::ErrorCode::UNAUTHENTICATED) << fenced.error().describe();
    auto sealed = intruder.seal(to, kChannel, 0, static_cast<std::int64_t>(route_epoch));
    EXPECT_EQ(sealed.code(), control::idl::ErrorCode::UNAUTHENTICATED) << sealed.error().describe();
    control::idl::ChainAssignment drop;
    drop.route.__set_channel(kChannel);
    drop.route.__set_partition(0);
    drop.route.__set_epoch(static_cast<std::int64_t>(route_epoch) + 100);
    drop.__set_segment_bytes(kSegment);
    drop.__set_ttl_ms(600000);
    auto dropped = intruder.configure_chain(to, drop);
    EXPECT_EQ(dropped.code(), control::idl::ErrorCode::UNAUTHENTICATED) << dropped.error().describe();
  }
  EXPECT_GE(fence_.stats().refused_unauthenticated, 12u);
  // Nothing of it reached the replica: same epoch, still acknowledging.
  EXPECT_EQ(broker_epoch_of_partition(), route_epoch);
  EXPECT_TRUE(publish_one(5s));
  // The intruder's epoch was never admitted: the controller's still is.
  EXPECT_EQ(fence_.stats().newest_epoch, reg.controller_epoch);
  auto controller_ping = admin_.ping(target(reg.admin_secret, reg.controller_epoch));
  EXPECT_TRUE(controller_ping.ok()) << controller_ping.error().describe();
}

// Issue 14: "brokers refuse calls from an older controller epoch" - a
// paused leader that wakes up after another controller took over. Here the
// newer controller is a second caller with the same credentials one epoch
// later; the in-process controller plays the deposed one.
TEST_F(NodeAgentTest, ANewerControllerEpochFencesTheOlderOnEveryAdminCallAndLease) {
  ASSERT_TRUE(agent_->register_node());
  const auto reg = calls_->last_registration;
  ASSERT_NO_FATAL_FAILURE(create_channel());
  const std::uint64_t route_epoch = broker_epoch_of_partition();
  const std::int64_t old_epoch = reg.controller_epoch;

  control::ThriftBrokerAdmin deposed{control::ThriftBrokerAdmin::Options{}};
  control::ThriftBrokerAdmin leader{control::ThriftBrokerAdmin::Options{}};
  auto before = deposed.ping(target(reg.admin_secret, old_epoch));
  ASSERT_TRUE(before.ok()) << before.error().describe();
  // A heartbeat answered by the old epoch renews the lease while it is the newest.
  std::uint64_t lease = agent_->lease_deadline_ns();
  std::this_thread::sleep_for(2ms);
  agent_->step();
  EXPECT_GT(agent_->lease_deadline_ns(), lease);

  auto took_over = leader.ping(target(reg.admin_secret, old_epoch + 1));
  ASSERT_TRUE(took_over.ok()) << took_over.error().describe();
  EXPECT_EQ(fence_.stats().newest_epoch, old_epoch + 1);

  // The deposed controller's connection authenticated before: every call on
  // it is refused now, and so is a new one at its epoch.
  auto ping = deposed.ping(target(reg.admin_secret, old_epoch));
  EXPECT_EQ(ping.code(), control::idl::ErrorCode::NOT_LEADER) << ping.error().describe();
  EXPECT_NE(ping.error().message.find("older than epoch"), std::string::npos) << ping.error().message;
  auto fenced = deposed.fence(target(reg.admin_secret, old_epoch), kChannel, 0,
                              static_cast<std::int64_t>(route_epoch) + 100);
  EXPECT_EQ(fenced.code(), control::idl::ErrorCode::NOT_LEADER) << fenced.error().describe();
  control::ThriftBrokerAdmin fresh{control::ThriftBrokerAdmin::Options{}};
  auto again =
      fresh.seal(target(reg.admin_secret, old_epoch), kChannel, 0, static_cast<std::int64_t>(route_epoch));
  EXPECT_EQ(again.code(), control::idl::ErrorCode::NOT_LEADER) << again.error().describe();
  EXPECT_EQ(broker_epoch_of_partition(), route_epoch) << "the deposed controller's fence reached the replica";

  // Its heartbeat answers renew nothing either (the in-process controller
  // answers at the old epoch): the lease runs out unless the new leader answers.
  lease = agent_->lease_deadline_ns();
  const int heartbeats = calls_->heartbeats;
  std::this_thread::sleep_for(2ms);
  agent_->step();
  EXPECT_EQ(calls_->heartbeats, heartbeats + 1);
  EXPECT_EQ(agent_->lease_deadline_ns(), lease) << "a deposed controller renewed the lease";
  EXPECT_GE(fence_.stats().refused_stale, 4u);

  // The new leader's calls go on.
  auto still = leader.ping(target(reg.admin_secret, old_epoch + 1));
  EXPECT_TRUE(still.ok()) << still.error().describe();
}

// Before its first registration the broker has no secret to check, so it
// takes every call (it holds nothing yet). What a caller claims then must
// count for nothing afterwards: not its epoch (a huge one would lock the
// real controller out), not its connection (it never showed the secret).
TEST_F(NodeAgentTest, WhatACallerClaimedBeforeTheRegistrationCountsForNothingAfter) {
  control::ThriftBrokerAdmin early{control::ThriftBrokerAdmin::Options{}};
  const auto early_target = target(std::string(16, 'x'), std::int64_t{1} << 60);
  auto before = early.ping(early_target);  // authenticates first: the fence is open
  ASSERT_TRUE(before.ok()) << before.error().describe();
  EXPECT_EQ(fence_.stats().newest_epoch, 0);

  ASSERT_TRUE(agent_->register_node());
  const auto reg = calls_->last_registration;
  auto after = early.ping(early_target);  // the same connection
  EXPECT_EQ(after.code(), control::idl::ErrorCode::UNAUTHENTICATED) << after.error().describe();
  EXPECT_EQ(fence_.stats().newest_epoch, reg.controller_epoch);
  ASSERT_NO_FATAL_FAILURE(create_channel());  // the controller's own calls go through
  EXPECT_TRUE(publish_one(5s));
}

}  // namespace
}  // namespace catena
