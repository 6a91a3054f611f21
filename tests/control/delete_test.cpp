// Controller::delete_channel (deleteChannel): the metadata goes in one
// record that survives a restart, every node that held a role is told to
// drop the partition (a route naming nobody, one epoch up), an unreachable
// node is retried until it answers, a channel created again under the name
// starts above every epoch the deleted one used, and a delete is refused
// while a group reads the channel.
#include <algorithm>
#include <gtest/gtest.h>
#include <set>
#include <string>
#include <vector>

#include "controller_fixture.hpp"
#include "test_support.hpp"

namespace catena::control::testing {
namespace {

class DeleteChannel : public ControllerFixture {
 protected:
  void SetUp() override {
    ControllerFixture::SetUp();
    for (const char* n : {"a", "b", "c"}) add_node(n, "z1");
  }
  // The names of the nodes whose broker holds (channel, p) as `route` says.
  std::set<std::string> holders(const idl::PartitionRoute& r) {
    std::set<std::string> out;
    for (const auto& [name, n] : nodes_) {
      for (const auto& rep : r.replicas) {
        if (rep.node_id == n.id) out.insert(name);
      }
    }
    return out;
  }
  // Every BrokerAdmin request to the node is lost from now on (until
  // admin_.set_hook({})); the node itself keeps what it holds.
  void cut_off(const std::string& name) {
    admin_.set_hook([addr = nodes_.at(name).admin_addr](const InProcBrokerAdmin::Call& call) {
      return call.to.admin_addr == addr ? InProcBrokerAdmin::Fate::drop_request
                                        : InProcBrokerAdmin::Fate::deliver;
    });
  }
};

TEST_F(DeleteChannel, DropsEveryPartitionOnItsNodesAndForgetsItDurably) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 2, 2)).ok());
  ASSERT_TRUE(controller_->create_channel(channel_config("kept", 1, 3)).ok());
  const auto r0 = route("orders", 0);
  const auto r1 = route("orders", 1);
  ASSERT_TRUE(controller_->commit_offset("billing", "orders", 1, 5).ok());
  ASSERT_TRUE(controller_->commit_offset("billing", "kept", 0, 7).ok());

  ASSERT_TRUE(controller_->delete_channel("orders").ok());

  EXPECT_EQ(controller_->describe_channel("orders").code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->get_route("orders", 0, 0).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->delete_channel("orders").code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  // Each holder was sent the route naming nobody at epoch + 1; the others nothing.
  for (const auto& r : {r0, r1}) {
    const auto held = holders(r);
    ASSERT_EQ(held.size(), 2U);
    for (const auto& [name, n] : nodes_) {
      const auto installed = n.broker->installed("orders", r.partition);
      if (held.count(name) == 0) {
        EXPECT_FALSE(installed.has_value()) << name;
        continue;
      }
      ASSERT_TRUE(installed.has_value()) << name;
      EXPECT_EQ(installed->epoch, r.epoch + 1) << name;
      EXPECT_TRUE(installed->replicas.empty()) << name;
      EXPECT_TRUE(installed->joining.empty()) << name;
      EXPECT_TRUE(installed->sealed.empty()) << name;
    }
  }
  // The group's offsets in it went; its offsets elsewhere stayed.
  EXPECT_EQ(controller_->fetch_offset("billing", "orders", 1).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  auto kept = controller_->fetch_offset("billing", "kept", 0);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, 7);

  restart();
  EXPECT_EQ(controller_->describe_channel("orders").code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  ASSERT_TRUE(controller_->describe_channel("kept").ok());
  // Created again: above the epochs of the drops, nothing of the old one.
  auto again = controller_->create_channel(channel_config("orders", 1, 2));
  ASSERT_TRUE(again.ok()) << again.error().describe();
  ASSERT_EQ(again->routes.size(), 1U);
  EXPECT_EQ(again->routes[0].epoch, std::max(r0.epoch, r1.epoch) + 2);
  EXPECT_EQ(again->routes[0].start_offset, 0);
  EXPECT_EQ(controller_->fetch_offset("billing", "orders", 0).code(), idl::ErrorCode::NO_OFFSET);
}

TEST_F(DeleteChannel, ANodeThatMissedItsDropIsToldWhenItAnswersAgain) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 1, 3)).ok());
  const auto r = route("orders", 0);
  const std::string away = nodes_.begin()->first;
  cut_off(away);
  ASSERT_TRUE(controller_->delete_channel("orders").ok());
  EXPECT_EQ(nodes_.at(away).broker->installed("orders", 0)->epoch, r.epoch) << "not reached yet";
  admin_.set_hook({});
  run_for(std::chrono::milliseconds(1500));
  const auto installed = nodes_.at(away).broker->installed("orders", 0);
  ASSERT_TRUE(installed.has_value());
  EXPECT_EQ(installed->epoch, r.epoch + 1);
  EXPECT_TRUE(installed->replicas.empty());
}

TEST_F(DeleteChannel, ACopyReportedAfterARestartIsDroppedAndANewChannelOfTheNameWaitsForIt) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 1, 3)).ok());
  const auto first = route("orders", 0);
  const std::string away = nodes_.begin()->first;
  cut_off(away);
  ASSERT_TRUE(controller_->delete_channel("orders").ok());
  // The controller that owed the drop is gone; the new one never heard of it.
  restart();
  // The name again, while the node is still out of reach: its push waits.
  auto again = controller_->create_channel(channel_config("orders", 1, 3));
  ASSERT_TRUE(again.ok()) << again.error().describe();
  const auto second = again->routes[0].epoch;
  EXPECT_EQ(second, first.epoch + 2);
  admin_.set_hook({});
  // Its heartbeats report the old copy: dropped first, then the new route.
  run_for(std::chrono::milliseconds(2000));
  EXPECT_EQ(nodes_.at(away).broker->epochs_seen("orders", 0),
            (std::vector<std::int64_t>{first.epoch, first.epoch + 1, second}));
  const auto installed = nodes_.at(away).broker->installed("orders", 0);
  ASSERT_TRUE(installed.has_value());
  EXPECT_EQ(installed->epoch, second);
  EXPECT_EQ(installed->replicas.size(), 3U);
}

TEST_F(DeleteChannel, ADropOwedBeforeARestartIsDeliveredByTheNextControllerWithoutAReport) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 2, 3)).ok());
  const auto r0 = route("orders", 0);
  const auto r1 = route("orders", 1);
  const std::string away = nodes_.begin()->first;
  cut_off(away);
  ASSERT_TRUE(controller_->delete_channel("orders").ok());
  EXPECT_EQ(nodes_.at(away).broker->installed("orders", 0)->epoch, r0.epoch) << "not reached yet";
  // The controller that owed the drops is gone; the node is back in reach
  // but sends no heartbeat (no report of what it holds) for as long as a
  // node may stay quiet before it is suspected: only the owed drops, kept
  // with the delete, can tell it.
  restart();
  admin_.set_hook({});
  run_for(std::chrono::milliseconds(300), {away});
  for (const auto& r : {r0, r1}) {
    const auto installed = nodes_.at(away).broker->installed("orders", r.partition);
    ASSERT_TRUE(installed.has_value());
    EXPECT_EQ(installed->epoch, r.epoch + 1) << "partition " << r.partition;
    EXPECT_TRUE(installed->replicas.empty());
  }
  // Delivered drops are forgotten durably: another restart sends none again.
  const auto calls = nodes_.at(away).broker->configure_calls().size();
  restart();
  run_for(std::chrono::milliseconds(300), {away});
  EXPECT_EQ(nodes_.at(away).broker->configure_calls().size(), calls);
}

TEST_F(DeleteChannel, IsRefusedWhileAGroupReadsIt) {
  ASSERT_TRUE(controller_->create_channel(channel_config("orders", 2, 2)).ok());
  auto member = controller_->join_group("billing", "orders", "m", {});
  ASSERT_TRUE(member.ok()) << member.error().describe();
  const auto refused = controller_->delete_channel("orders");
  EXPECT_EQ(refused.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_TRUE(controller_->describe_channel("orders").ok());
  ASSERT_TRUE(controller_->leave_group("billing", member->member_id).ok());
  EXPECT_TRUE(controller_->delete_channel("orders").ok());
}

}  // namespace
}  // namespace catena::control::testing
