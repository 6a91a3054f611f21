// Controller request paths: channel creation errors, route lookups,
// registration ids and epochs.
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <catena/chain/limits.hpp>

#include "controller_fixture.hpp"

namespace catena::control {
namespace {

using testing::channel_config;

class ControllerRequests : public testing::ControllerFixture {};

TEST_F(ControllerRequests, CreateChannelErrors) {
  add_node("a", "z1");
  add_node("b", "z2");
  auto bad = controller_->create_channel(channel_config("bad name"));
  EXPECT_EQ(bad.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error().message.find("channel name"), std::string::npos);

  auto short_of_nodes = controller_->create_channel(channel_config("r3", 1, 3));
  EXPECT_EQ(short_of_nodes.code(), idl::ErrorCode::NOT_ENOUGH_NODES) << short_of_nodes.error().message;
  EXPECT_FALSE(controller_->describe_channel("r3").ok()) << "a refused channel must not be half-created";

  ASSERT_TRUE(controller_->create_channel(channel_config("r2", 4, 2)).ok());
  EXPECT_EQ(controller_->create_channel(channel_config("r2", 1, 1)).code(), idl::ErrorCode::CHANNEL_EXISTS);
}

// The limits the data plane shares (chain/limits.hpp), through the
// controller's own request paths: at the limit accepted, one over refused
// with a message naming the field and the rule.
TEST_F(ControllerRequests, NamesAtTheLimitAreAcceptedAndOneOverRefused) {
  const std::string longest_id(chain::limits::kMaxNodeIdLength, 'n');
  auto& a = add_node("a", "z1", longest_id);
  EXPECT_EQ(a.id, longest_id);
  const std::string longest_channel(chain::limits::kMaxChannelNameLength, 'c');
  auto created = controller_->create_channel(channel_config(longest_channel, 1, 1));
  ASSERT_TRUE(created.ok()) << created.error().describe();
  auto route = controller_->get_route(longest_channel, 0, 0);
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(route->channel, longest_channel);
  EXPECT_EQ(route->replicas.at(0).node_id, longest_id);

  auto too_long = controller_->create_channel(channel_config(longest_channel + "c", 1, 1));
  EXPECT_EQ(too_long.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(too_long.error().message.find("channel name must be 1..128 characters"), std::string::npos)
      << too_long.error().message;

  idl::NodeInfo info;
  info.__set_node_id(longest_id + "n");
  info.__set_admin_addr("b.test:7000");
  info.__set_fabric_addr("b.test:9000");
  auto refused = controller_->register_node(info);
  EXPECT_EQ(refused.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.error().message.find("node_id must be 1..128 characters"), std::string::npos)
      << refused.error().message;
}

TEST_F(ControllerRequests, RouteLookups) {
  add_node("a", "z1");
  ASSERT_TRUE(controller_->create_channel(channel_config("c", 2, 1)).ok());
  EXPECT_EQ(controller_->get_route("nope", 0, 0).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->describe_channel("nope").code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->get_route("c", 2, 0).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->get_route("c", -1, 0).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->get_route("c", 0, 2).code(), idl::ErrorCode::INVALID_ARGUMENT);  // from the future
  auto r = controller_->get_route("c", 1, 1);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->epoch, 1);
  EXPECT_EQ(r->start_offset, 0);
  EXPECT_EQ(r->partition, 1);
  auto list = controller_->list_channels();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].routes.size(), 2u);
}

TEST_F(ControllerRequests, RegistrationAssignsIdsAndFreshEpochs) {
  auto& a = add_node("a", "z1");
  auto& b = add_node("b", "z1");
  EXPECT_EQ(a.id, "node-1");
  EXPECT_EQ(b.id, "node-2");
  EXPECT_LT(a.epoch, b.epoch);
  auto& named = add_node("c", "z1", "node-3");  // the operator took the next automatic id
  EXPECT_EQ(named.id, "node-3");
  EXPECT_EQ(add_node("d", "z1").id, "node-4");
  const auto old_epoch = nodes_["a"].epoch;
  EXPECT_GT(add_node("a", "z1", "node-1").epoch, old_epoch);

  idl::NodeInfo bad;
  bad.__set_admin_addr("nowhere");
  bad.__set_fabric_addr("x");
  EXPECT_EQ(controller_->register_node(bad).code(), idl::ErrorCode::INVALID_ARGUMENT);
}

TEST_F(ControllerRequests, GroupOffsetsAreDurablePerGroupAndPartition) {
  add_node("a", "z1");
  ASSERT_TRUE(controller_->create_channel(channel_config("c", 2, 1)).ok());
  EXPECT_EQ(controller_->fetch_offset("g1", "c", 0).code(), idl::ErrorCode::NO_OFFSET);
  ASSERT_TRUE(controller_->commit_offset("g1", "c", 0, 100).ok());
  ASSERT_TRUE(controller_->commit_offset("g1", "c", 1, 7).ok());
  ASSERT_TRUE(controller_->commit_offset("g2", "c", 0, 5).ok());
  ASSERT_TRUE(controller_->commit_offset("g1", "c", 0, 90).ok());  // a rewind is allowed
  EXPECT_EQ(controller_->commit_offset("g1", "nope", 0, 1).code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(controller_->commit_offset("g1", "c", 2, 1).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->commit_offset("g1", "c", 0, -1).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->commit_offset("", "c", 0, 1).code(), idl::ErrorCode::INVALID_ARGUMENT);
  restart();
  EXPECT_EQ(*controller_->fetch_offset("g1", "c", 0), 90);
  EXPECT_EQ(*controller_->fetch_offset("g1", "c", 1), 7);
  EXPECT_EQ(*controller_->fetch_offset("g2", "c", 0), 5);
  EXPECT_EQ(controller_->fetch_offset("g2", "c", 1).code(), idl::ErrorCode::NO_OFFSET);
}

// Producer identities are issued, never chosen: every call hands out an
// epoch above every epoch issued before, across controller restarts (which
// skip the rest of a reserved block rather than risk reissuing it).
TEST_F(ControllerRequests, ProducerEpochsAreIssuedOnceAndGrowAcrossRestarts) {
  std::set<std::int64_t> epochs;
  std::int64_t last = 0;
  auto issue = [&](std::int64_t id) {
    auto r = controller_->init_producer(id);
    EXPECT_TRUE(r.ok()) << r.error().describe();
    if (!r.ok()) return idl::ProducerIdentity{};
    EXPECT_GT(r->producer_epoch, last);
    last = r->producer_epoch;
    EXPECT_TRUE(epochs.insert(r->producer_epoch).second);
    return *r;
  };
  const auto a = issue(0);
  const auto b = issue(0);
  EXPECT_NE(a.producer_id, b.producer_id);
  EXPECT_NE(a.producer_id & Controller::kIssuedProducerIdBit, 0);
  EXPECT_EQ(issue(77).producer_id, 77);
  for (int i = 0; i < 3 * Controller::kProducerBlock; ++i) issue(77);  // crosses reserved blocks
  restart();
  EXPECT_EQ(issue(77).producer_id, 77);
  EXPECT_NE(issue(0).producer_id, a.producer_id);
  EXPECT_EQ(controller_->init_producer(-1).code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(controller_->init_producer(Controller::kIssuedProducerIdBit).code(),
            idl::ErrorCode::INVALID_ARGUMENT);
}

// Replica links are authenticated with a secret per route epoch, pushed only
// to the route's members: 16 bytes, the same for every member and after a
// controller restart, different for another partition or epoch.
TEST_F(ControllerRequests, AssignmentsCarryAStablePerEpochLinkSecret) {
  std::mutex mu;
  std::map<std::tuple<std::int32_t, std::int64_t, std::string>, std::string>
      seen;  // (partition, epoch, node)
  admin_.set_hook([&](const InProcBrokerAdmin::Call& c) {
    if (c.method == InProcBrokerAdmin::Method::configure_chain) {
      std::lock_guard lk(mu);
      EXPECT_TRUE(c.assignment.__isset.link_secret);
      seen[{c.assignment.route.partition, c.assignment.route.epoch, c.to.node_id}] = c.assignment.link_secret;
    }
    return InProcBrokerAdmin::Fate::deliver;
  });
  add_node("a", "z1");
  add_node("b", "z2");
  ASSERT_TRUE(controller_->create_channel(channel_config("c", 2, 2)).ok());
  std::map<std::tuple<std::int32_t, std::int64_t, std::string>, std::string> before;
  {
    std::lock_guard lk(mu);
    before = seen;
    seen.clear();
  }
  ASSERT_EQ(before.size(), 4u);  // 2 partitions x 2 members
  std::set<std::string> secrets;
  for (const auto& [key, secret] : before) {
    EXPECT_EQ(secret.size(), 16u);
    secrets.insert(secret);
  }
  EXPECT_EQ(secrets.size(), 2u) << "one secret per partition epoch, shared by its members";
  restart();
  controller_->tick();  // a restarted controller pushes every route again
  std::lock_guard lk(mu);
  ASSERT_FALSE(seen.empty());
  for (const auto& [key, secret] : seen) {
    ASSERT_TRUE(before.count(key)) << "epoch moved on restart";
    EXPECT_EQ(secret, before.at(key)) << "a restarted controller pushed another secret for the same epoch";
  }
}

}  // namespace
}  // namespace catena::control
