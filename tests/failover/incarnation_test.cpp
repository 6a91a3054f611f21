// Node incarnations (issue 8, sequence 2): a broker restarted with the same
// node id and address is a new, empty incarnation. It must never take the
// old incarnation's chain role back: the controller's assignments and the
// replica hellos name the incarnation (node epoch), and everything that
// names another one is refused.
//
// Here in one process: real Brokers, the real BrokerAdmin Thrift server and
// client, and hellos on a real fabric connection.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <gtest/gtest.h>
#include <string>
#include <thread>

#include <catena/broker/broker.hpp>
#include <catena/broker/broker_admin_server.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/wire.hpp>
#include <catena/control/thrift_broker_admin.hpp>

namespace catena {
namespace {

using namespace std::chrono_literals;
namespace wire = chain::wire;

class Incarnation : public ::testing::Test {
 protected:
  static constexpr std::int64_t kSegment = 64 << 10;

  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      broker::BrokerConfig cfg;
      cfg.node_id = "node-" + std::to_string(i);
      cfg.slot_count = 4;
      auto b = broker::Broker::start(cfg);
      ASSERT_TRUE(b.ok()) << b.error().message;
      brokers_.push_back(std::move(b.value()));
      servers_.push_back(std::make_unique<broker::BrokerAdminServer>(*brokers_.back(),
                                                                     broker::BrokerAdminServer::Options{}));
      ASSERT_TRUE(servers_.back()->start().ok());
    }
  }

  void TearDown() override {
    for (auto& s : servers_) s->stop();
    for (auto& b : brokers_) b->stop();
  }

  control::BrokerTarget target(int i) {
    control::BrokerTarget t;
    t.node_id = brokers_[static_cast<std::size_t>(i)]->node_id();
    t.admin_addr = "127.0.0.1:" + std::to_string(servers_[static_cast<std::size_t>(i)]->port());
    return t;
  }

  // Chain node-0 -> node-1 at `epoch`, naming incarnations e0 and e1.
  control::idl::ChainAssignment assignment(std::int64_t epoch, std::int64_t e0, std::int64_t e1) {
    control::idl::ChainAssignment a;
    a.route.__set_channel("inc");
    a.route.__set_partition(0);
    a.route.__set_epoch(epoch);
    for (int i = 0; i < 2; ++i) {
      control::idl::Replica r;
      r.__set_node_id(brokers_[static_cast<std::size_t>(i)]->node_id());
      r.__set_fabric_addr(brokers_[static_cast<std::size_t>(i)]->fabric_address());
      r.__set_admin_addr(target(i).admin_addr);
      r.__set_node_epoch(i == 0 ? e0 : e1);
      a.route.replicas.push_back(r);
    }
    a.__set_segment_bytes(kSegment);
    a.__set_ttl_ms(60000);
    a.__set_channel_partitions(1);
    if (!secret_.empty()) a.__set_link_secret(secret_);
    return a;
  }

  std::string secret_;  // the route epoch's link secret, when set
  std::vector<std::unique_ptr<broker::Broker>> brokers_;
  std::vector<std::unique_ptr<broker::BrokerAdminServer>> servers_;
  control::ThriftBrokerAdmin admin_{control::ThriftBrokerAdmin::Options{}};
};

// The controller may push an old route to a restarted process before that
// process registered (a correlated restart of brokers and controller): the
// process must refuse a role that names any incarnation but its own.
TEST_F(Incarnation, BrokerRefusesAnAssignmentForAnotherIncarnationOfItself) {
  // Not registered yet: no assignment at all.
  auto unregistered = admin_.configure_chain(target(0), assignment(1, 7, 9));
  EXPECT_EQ(unregistered.code(), control::idl::ErrorCode::FENCED);
  EXPECT_TRUE(brokers_[0]->stats().partitions.empty());

  brokers_[0]->set_node_epoch(8);  // registered again: incarnation 8
  auto old_role = admin_.configure_chain(target(0), assignment(1, 7, 9));
  EXPECT_EQ(old_role.code(), control::idl::ErrorCode::FENCED);
  EXPECT_NE(old_role.error().message.find("incarnation 7"), std::string::npos) << old_role.error().message;
  EXPECT_TRUE(brokers_[0]->stats().partitions.empty()) << "the fresh process took the old incarnation's role";

  auto mine = admin_.configure_chain(target(0), assignment(2, 8, 9));
  EXPECT_TRUE(mine.ok()) << mine.error().describe();
  std::this_thread::sleep_for(50ms);  // stats are a snapshot refreshed every few ms
  const auto st = brokers_[0]->stats();
  ASSERT_EQ(st.partitions.size(), 1u);
  EXPECT_EQ(st.partitions[0].epoch, 2u);
}

// A replica link is accepted only from the incarnation the route names as
// the predecessor; the predecessor likewise accepts only the successor
// incarnation its route names. Both stay unlinked otherwise.
TEST_F(Incarnation, ReplicaLinksNameTheIncarnationsOfTheRoute) {
  brokers_[0]->set_node_epoch(8);
  brokers_[1]->set_node_epoch(9);
  ASSERT_TRUE(admin_.configure_chain(target(1), assignment(1, 8, 9)).ok());

  auto provider = fabric::Provider::open("soft");
  ASSERT_TRUE(provider.ok());
  auto commit_word = provider.value()->allocate(64, fabric::kLocalWrite | fabric::kRemoteWrite);
  ASSERT_TRUE(commit_word.ok());
  auto hello_from = [&](std::uint64_t node_epoch) {
    wire::ReplicaHello h{};
    h.ref.set("inc", 0, 1);
    wire::put_text(h.from_node, "node-0");
    h.from_node_epoch = node_epoch;
    return chain::Link::dial<wire::ReplicaWelcome>(
        **provider, brokers_[1]->fabric_address(), h, 3s, [&](fabric::Endpoint& ep, wire::ReplicaHello& hh) {
          return chain::expose_into(ep, *commit_word.value(), hh.commit_word);
        });
  };
  // node-0's previous incarnation (7): refused, and nothing about the
  // successor's memory is handed out.
  auto old = hello_from(7);
  ASSERT_TRUE(old.welcome.has_value()) << old.error.message;
  EXPECT_EQ(old.welcome->status, wire::Status::stale_epoch);
  for (const auto& s : old.welcome->slots) EXPECT_EQ(s.region.rkey, 0u);
  EXPECT_EQ(old.welcome->node_epoch, 9u);

  auto named = hello_from(8);
  ASSERT_TRUE(named.welcome.has_value()) << named.error.message;
  EXPECT_EQ(named.welcome->status, wire::Status::ok);
  named.link.reset();

  // node-0's route names successor incarnation 10, but node-1 is 9 (say the
  // successor restarted in between): node-0 never links to it.
  ASSERT_TRUE(admin_.configure_chain(target(0), assignment(1, 8, 10)).ok());
  std::this_thread::sleep_for(600ms);  // a few of node-0's connect attempts
  const auto st = brokers_[0]->stats();
  ASSERT_EQ(st.partitions.size(), 1u);
  EXPECT_FALSE(st.partitions[0].replica.successor_connected);
  EXPECT_FALSE(brokers_[0]->take_link_reports().empty());

  // With the route naming the right incarnations (a new epoch), they link.
  ASSERT_TRUE(admin_.configure_chain(target(1), assignment(2, 8, 9)).ok());
  ASSERT_TRUE(admin_.configure_chain(target(0), assignment(2, 8, 9)).ok());
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  bool linked = false;
  while (!linked && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    linked = brokers_[0]->stats().partitions[0].replica.successor_connected;
  }
  EXPECT_TRUE(linked);
}

// Knowing the route (node ids, incarnations, epoch: any client can read
// them) is not enough to pose as a replica: the hello must carry the route
// epoch's link secret, which only the route's members were given. The real
// predecessor, which has it, links.
TEST_F(Incarnation, ReplicaLinksNeedTheRouteEpochsSecret) {
  secret_ = std::string("0123456789abcdef");
  brokers_[0]->set_node_epoch(8);
  brokers_[1]->set_node_epoch(9);
  ASSERT_TRUE(admin_.configure_chain(target(1), assignment(1, 8, 9)).ok());
  auto provider = fabric::Provider::open("soft");
  ASSERT_TRUE(provider.ok());
  auto commit_word = provider.value()->allocate(64, fabric::kLocalWrite | fabric::kRemoteWrite);
  ASSERT_TRUE(commit_word.ok());
  auto hello_with = [&](const std::string& secret) {
    wire::ReplicaHello h{};
    h.ref.set("inc", 0, 1);
    wire::put_text(h.from_node, "node-0");
    h.from_node_epoch = 8;
    std::memcpy(h.link_secret, secret.data(), std::min(secret.size(), sizeof h.link_secret));
    return chain::Link::dial<wire::ReplicaWelcome>(
        **provider, brokers_[1]->fabric_address(), h, 3s, [&](fabric::Endpoint& ep, wire::ReplicaHello& hh) {
          return chain::expose_into(ep, *commit_word.value(), hh.commit_word);
        });
  };
  for (const std::string& forged : {std::string(16, '\0'), std::string("0123456789abcdeX")}) {
    auto d = hello_with(forged);
    ASSERT_TRUE(d.welcome.has_value()) << d.error.message;
    EXPECT_EQ(d.welcome->status, wire::Status::unauthenticated);
    for (const auto& slot : d.welcome->slots) EXPECT_EQ(slot.region.rkey, 0u) << "slot keys handed out";
  }
  auto genuine = hello_with(secret_);
  ASSERT_TRUE(genuine.welcome.has_value()) << genuine.error.message;
  EXPECT_EQ(genuine.welcome->status, wire::Status::ok);
  genuine.link.reset();
  // The real predecessor, configured by the same assignment, links.
  ASSERT_TRUE(admin_.configure_chain(target(0), assignment(1, 8, 9)).ok());
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  bool linked = false;
  while (!linked && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    const auto st = brokers_[0]->stats();
    linked = !st.partitions.empty() && st.partitions[0].replica.successor_connected;
  }
  EXPECT_TRUE(linked);
}

}  // namespace
}  // namespace catena
