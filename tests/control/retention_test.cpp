// Controller::alter_retention (alterRetention): the channel's ttl_ms changes
// in one durable record and reaches every replica of every partition as its
// assignment again at the same route epoch; a node out of reach gets it once
// it answers, a restarted controller keeps it and pushes it, a node that
// registers again is assigned it; bad values are refused and change nothing.
// (The data plane's side, old records expiring by the new ttl on real nodes:
// tests/broker/cli_script_test.cpp, CliScript.AlterTtl...)
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "controller_fixture.hpp"
#include "test_support.hpp"

namespace catena::control::testing {
namespace {

class Retention : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    for (const char* n : {"a", "b", "c"}) add_node(n, "z1");
  }
  // The ttl_ms of the newest configureChain each broker holding a role in
  // (channel, p) accepted at `epoch`, by node name.
  std::map<std::string, std::int64_t> pushed_ttl(const std::string& channel, int p, std::int64_t epoch) {
    std::map<std::string, std::int64_t> out;
    for (const auto& [name, n] : nodes_) {
      for (const auto& a : n.broker->configure_calls()) {
        if (a.route.channel == channel && a.route.partition == p && a.route.epoch == epoch)
          out[name] = a.ttl_ms;
      }
    }
    return out;
  }
};

TEST_F(Retention, ReachesEveryReplicaAtTheSameEpochAndSurvivesARestart) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 2, 3)).ok());
  const auto r0 = route("orders", 0);
  const auto r1 = route("orders", 1);
  EXPECT_EQ(pushed_ttl("orders", 0, r0.epoch),
            (std::map<std::string, std::int64_t>{{"a", 60000}, {"b", 60000}, {"c", 60000}}));

  auto altered = controller_->alter_retention("orders", 5000);
  ASSERT_TRUE(altered.ok()) << altered.error().describe();
  EXPECT_EQ(altered->config.ttl_ms, 5000);
  EXPECT_EQ(altered->config.partitions, 2);
  // No new epoch: clients are not sent anywhere.
  EXPECT_EQ(route("orders", 0).epoch, r0.epoch);
  EXPECT_EQ(route("orders", 1).epoch, r1.epoch);
  const std::map<std::string, std::int64_t> all_new{{"a", 5000}, {"b", 5000}, {"c", 5000}};
  EXPECT_EQ(pushed_ttl("orders", 0, r0.epoch), all_new);
  EXPECT_EQ(pushed_ttl("orders", 1, r1.epoch), all_new);
  EXPECT_EQ(controller_->describe_channel("orders")->config.ttl_ms, 5000);

  restart();
  auto described = controller_->describe_channel("orders");
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->config.ttl_ms, 5000);
  // The new controller pushes every route again, with the ttl it read.
  const auto before = nodes_.at("a").broker->configure_calls().size();
  run_for(std::chrono::milliseconds(300));
  const auto calls = nodes_.at("a").broker->configure_calls();
  ASSERT_GT(calls.size(), before);
  for (std::size_t i = before; i < calls.size(); ++i) EXPECT_EQ(calls[i].ttl_ms, 5000);
}

TEST_F(Retention, ANodeOutOfReachGetsItWhenItAnswersAndARegisteredAgainNodeIsAssignedIt) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 1, 3)).ok());
  const auto r = route("orders", 0);
  const std::string away_addr = nodes_.at("a").admin_addr;
  admin_.set_hook([&](const InProcBrokerAdmin::Call& call) {
    return call.to.admin_addr == away_addr ? InProcBrokerAdmin::Fate::drop_request
                                           : InProcBrokerAdmin::Fate::deliver;
  });
  auto altered = controller_->alter_retention("orders", 2000);
  ASSERT_TRUE(altered.ok()) << altered.error().describe();
  EXPECT_EQ(pushed_ttl("orders", 0, r.epoch),
            (std::map<std::string, std::int64_t>{{"a", 60000}, {"b", 2000}, {"c", 2000}}));
  admin_.set_hook({});
  run_for(std::chrono::milliseconds(400));
  EXPECT_EQ(pushed_ttl("orders", 0, r.epoch),
            (std::map<std::string, std::int64_t>{{"a", 2000}, {"b", 2000}, {"c", 2000}}));
  EXPECT_EQ(route("orders", 0).epoch, r.epoch);

  // A restarted, empty process of "b" registers again: whatever it is
  // assigned carries the new ttl.
  kill_broker("b");
  run_for(std::chrono::milliseconds(1500), {"b"});
  register_again("b");
  run_for(std::chrono::milliseconds(1500));
  const auto calls = nodes_.at("b").broker->configure_calls();
  ASSERT_FALSE(calls.empty());
  for (const auto& a : calls) EXPECT_EQ(a.ttl_ms, 2000);
}

TEST_F(Retention, BadValuesAreRefusedAndChangeNothing) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 1, 3)).ok());
  const auto calls = nodes_.at("a").broker->configure_calls().size();
  auto r = controller_->alter_retention("orders", 99);
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.error().message, "ttl_ms must be 100..1000000000000, got 99");
  r = controller_->alter_retention("orders", 1'000'000'000'001);
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  r = controller_->alter_retention("orders", -5);
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  r = controller_->alter_retention("orders", 60000);
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(r.error().message, "channel 'orders' already has ttl_ms 60000");
  EXPECT_EQ(controller_->alter_retention("nosuch", 5000).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->describe_channel("orders")->config.ttl_ms, 60000);
  EXPECT_EQ(nodes_.at("a").broker->configure_calls().size(), calls);
}

}  // namespace
}  // namespace catena::control::testing
