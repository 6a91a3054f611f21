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
    return inner_.register_node(info, held);
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
    admin_server_ =
        std::make_unique<broker::BrokerAdminServer>(*broker_, broker::BrokerAdminServer::Options{});
    ASSERT_TRUE(admin_server_->start().ok());

    info_.node_id = "node-a";
    info_.admin_addr = "127.0.0.1:" + std::to_string(admin_server_->port());
    info_.fabric_addr = broker_->fabric_address();
    info_.zone = "z1";
    broker::NodeAgent::Options ao;
    ao.info = info_;
    ao.controller = "in-process";
    ao.provider = provider_spec();
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

}  // namespace
}  // namespace catena
