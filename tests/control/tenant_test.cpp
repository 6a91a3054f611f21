// Tenants (README "Tenants"): tokens, per-connection identity, namespaces
// and quotas, against the catena-controller binary over real sockets (the
// brokers are FakeBroker BrokerAdmin servers in this process).
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <catena/control/controller_client.hpp>
#include <catena/control/tenants.hpp>
#include <catena/control/thrift_server.hpp>

#include "controller_fixture.hpp"
#include "controller_process.hpp"
#include "test_support.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::channel_config;
using testing::ControllerProcess;
using testing::FakeBroker;
using testing::TempDir;

constexpr const char* kAdminToken = "admin-token-0123456789abcdef";

idl::TenantQuotas tenant_quotas(std::int64_t channels, std::int64_t partitions, std::int64_t groups) {
  idl::TenantQuotas q;
  q.__set_max_channels(channels);
  q.__set_max_partitions(partitions);
  q.__set_max_groups(groups);
  return q;
}

template <class T>
ErrorCode tenant_code_of(const Result<T>& r) {
  return r ? idl::ErrorCode::OK : r.code();
}

std::string slurp_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A catena-controller process (admin token in a file unless open) with one
// FakeBroker registered, so channels of replication 1 can be placed.
class TenantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    route_thrift_logs_to_spdlog();
    broker_ = std::make_shared<FakeBroker>("b0");
    broker_server_ = make_broker_admin_server(broker_, {});
    ASSERT_TRUE(broker_server_->start().ok());
    std::ofstream(dir_.path() / "admin.token") << kAdminToken << "\n";
  }

  void start(bool closed = true, std::vector<std::string> flags = {}) {
    flags.push_back("--data-dir");
    flags.push_back((dir_.path() / "data").string());
    if (closed) {
      flags.push_back("--admin-token-file");
      flags.push_back((dir_.path() / "admin.token").string());
    }
    proc_ = std::make_unique<ControllerProcess>(flags, dir_.path() / "port");
    ASSERT_TRUE(proc_->spawned());
    const auto port = proc_->wait_for_port();
    ASSERT_NE(port, 0) << "catena-controller did not start";
    address_ = "127.0.0.1:" + std::to_string(port);
    admin_ = client(closed ? kAdminToken : "");
  }

  void restart() {
    ASSERT_EQ(proc_->stop(SIGTERM), 0);
    proc_.reset();
    start();
  }

  std::unique_ptr<ControllerClient> client(const std::string& token) const {
    return std::make_unique<ControllerClient>(ControllerClient::Options{address_, 1000ms, 5000ms, token});
  }

  void register_broker() {
    idl::NodeInfo info;
    info.__set_admin_addr(broker_server_->address());
    info.__set_fabric_addr("127.0.0.1:9999");
    auto reg = admin_->register_node(info);
    ASSERT_TRUE(reg.ok()) << reg.error().describe();
    node_id_ = reg->node_id;
    node_epoch_ = reg->node_epoch;
  }

  std::string create_tenant(const std::string& name, const idl::TenantQuotas& q = tenant_quotas(-1, -1, -1)) {
    auto token = admin_->create_tenant(name, q);
    EXPECT_TRUE(token.ok()) << token.error().describe();
    if (!token) return {};
    EXPECT_EQ(token->size(), 2 * kTokenBytes);
    return *token;
  }

  TempDir dir_;
  std::shared_ptr<FakeBroker> broker_;
  std::unique_ptr<ThriftServer> broker_server_;
  std::unique_ptr<ControllerProcess> proc_;
  std::string address_;
  std::unique_ptr<ControllerClient> admin_;
  std::string node_id_;
  std::int64_t node_epoch_ = 0;
};

TEST_F(TenantTest, UnauthenticatedAndWrongTokensAreRefused) {
  start();
  register_broker();
  ASSERT_TRUE(admin_->create_channel(channel_config("open-to-admin", 1, 1)).ok());

  // No authenticate on the connection: every call is refused.
  auto anonymous = client("");
  const auto list = anonymous->list_channels();
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.code(), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_NE(list.error().message.find("authenticate"), std::string::npos) << list.error().message;
  EXPECT_EQ(tenant_code_of(anonymous->describe_channel("open-to-admin")), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->get_route("open-to-admin", 0)), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->create_channel(channel_config("x", 1, 1))),
            idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->init_producer(0)), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->cluster_status()), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->create_tenant("evil", tenant_quotas(-1, -1, -1))),
            idl::ErrorCode::UNAUTHENTICATED);
  idl::NodeInfo info;
  info.__set_admin_addr(broker_server_->address());
  info.__set_fabric_addr("127.0.0.1:9998");
  EXPECT_EQ(tenant_code_of(anonymous->register_node(info)), idl::ErrorCode::UNAUTHENTICATED);

  // A wrong token: refused at authenticate, and the connection stays
  // unauthenticated.
  auto forged = client(std::string(64, 'a'));
  EXPECT_EQ(tenant_code_of(forged->list_channels()), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->authenticate("not-the-admin-token")), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(anonymous->list_channels()), idl::ErrorCode::UNAUTHENTICATED);

  // The admin token: the admin.
  auto who = anonymous->authenticate(kAdminToken);
  ASSERT_TRUE(who.ok()) << who.error().describe();
  EXPECT_TRUE(who->admin);
  auto channels = anonymous->list_channels();
  ASSERT_TRUE(channels.ok()) << channels.error().describe();
  EXPECT_EQ(channels->size(), 1U);
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

TEST_F(TenantTest, ATenantReachesNothingOfAnotherTenantNorAdminCalls) {
  start();
  register_broker();
  const std::string token_a = create_tenant("A");
  const std::string token_b = create_tenant("B");
  auto a = client(token_a);
  auto b = client(token_b);
  auto who = b->authenticate(token_b);
  ASSERT_TRUE(who.ok()) << who.error().describe();
  EXPECT_FALSE(who->admin);
  EXPECT_EQ(who->tenant, "B");

  // A's channel, offsets and group.
  ASSERT_TRUE(a->create_channel(channel_config("A.orders", 2, 1)).ok());
  ASSERT_TRUE(a->commit_offset("A.audit", "A.orders", 0, 42).ok());
  auto member = a->join_group("A.readers", "A.orders", "m1", {});
  ASSERT_TRUE(member.ok()) << member.error().describe();
  ASSERT_TRUE(b->create_channel(channel_config("B.own", 1, 1)).ok());
  const auto a_before = a->describe_channel("A.orders");
  ASSERT_TRUE(a_before.ok()) << a_before.error().describe();

  // B tries every Controller call on A's names: the same answer whether or
  // not the name exists.
  constexpr auto denied = idl::ErrorCode::PERMISSION_DENIED;
  EXPECT_EQ(tenant_code_of(b->create_channel(channel_config("A.mine", 1, 1))), denied);
  EXPECT_EQ(tenant_code_of(b->create_channel(channel_config("no-namespace", 1, 1))), denied);
  EXPECT_EQ(tenant_code_of(b->describe_channel("A.orders")), denied);
  EXPECT_EQ(tenant_code_of(b->describe_channel("A.does-not-exist")), denied);
  EXPECT_EQ(tenant_code_of(b->get_route("A.orders", 0)), denied);
  EXPECT_EQ(tenant_code_of(b->alter_channel("A.orders", 1)), denied);
  idl::FailureReport report;
  report.__set_reporter("b");
  report.__set_suspect_node_id(node_id_);
  report.__set_channel("A.orders");
  report.__set_epoch(1);
  EXPECT_EQ(tenant_code_of(b->report_failure(report)), denied);
  report.__set_channel("");
  EXPECT_EQ(tenant_code_of(b->report_failure(report)), denied);
  EXPECT_EQ(tenant_code_of(b->commit_offset("A.audit", "A.orders", 0, 0)), denied);
  EXPECT_EQ(tenant_code_of(b->commit_offset("B.audit", "A.orders", 0, 0)), denied);
  EXPECT_EQ(tenant_code_of(b->fetch_offset("A.audit", "A.orders", 0)), denied);
  EXPECT_EQ(tenant_code_of(b->join_group("A.readers", "A.orders", "thief", {})), denied);
  EXPECT_EQ(tenant_code_of(b->join_group("B.readers", "A.orders", "thief", {})), denied);
  EXPECT_EQ(tenant_code_of(b->group_heartbeat("A.readers", member->member_id, {})), denied);
  EXPECT_EQ(tenant_code_of(b->leave_group("A.readers", member->member_id)), denied);
  idl::PartitionOffset po;
  po.__set_partition(0);
  po.__set_offset(0);
  EXPECT_EQ(
      tenant_code_of(b->commit_offsets("A.readers", "A.orders", member->member_id, member->generation, {po})),
      denied);
  EXPECT_EQ(tenant_code_of(b->describe_group("A.readers")), denied);
  // Admin calls.
  idl::NodeInfo info;
  info.__set_admin_addr(broker_server_->address());
  info.__set_fabric_addr("127.0.0.1:9998");
  EXPECT_EQ(tenant_code_of(b->register_node(info)), denied);
  idl::HeartbeatRequest hb;
  hb.__set_node_id(node_id_);
  hb.__set_node_epoch(node_epoch_);
  EXPECT_EQ(tenant_code_of(b->heartbeat(hb)), denied);
  EXPECT_EQ(tenant_code_of(b->declare_partition_lost("A.orders", 0)), denied);
  EXPECT_EQ(tenant_code_of(b->declare_partition_lost("B.own", 0)), denied);
  EXPECT_EQ(tenant_code_of(b->move_partition("A.orders", 0, {node_id_})), denied);
  EXPECT_EQ(tenant_code_of(b->cluster_status()), denied);
  EXPECT_EQ(tenant_code_of(b->drain_node(node_id_)), denied);
  EXPECT_EQ(tenant_code_of(b->rebalance(true)), denied);
  EXPECT_EQ(tenant_code_of(b->add_node(node_id_, true)), denied);
  EXPECT_EQ(tenant_code_of(b->create_tenant("C", tenant_quotas(-1, -1, -1))), denied);
  EXPECT_EQ(tenant_code_of(b->list_tenants()), denied);
  EXPECT_EQ(tenant_code_of(b->delete_tenant("A")), denied);
  EXPECT_EQ(tenant_code_of(b->rotate_tenant_token("A")), denied);
  // Lists show B's own names only; a producer id is anyone's.
  auto listed = b->list_channels();
  ASSERT_TRUE(listed.ok()) << listed.error().describe();
  ASSERT_EQ(listed->size(), 1U);
  EXPECT_EQ(listed->front().config.name, "B.own");
  auto groups = b->list_groups();
  ASSERT_TRUE(groups.ok()) << groups.error().describe();
  EXPECT_TRUE(groups->empty());
  EXPECT_TRUE(b->init_producer(0).ok());

  // A's state is as it was.
  const auto a_after = a->describe_channel("A.orders");
  ASSERT_TRUE(a_after.ok()) << a_after.error().describe();
  EXPECT_EQ(a_after->config, a_before->config);
  EXPECT_EQ(a_after->routes, a_before->routes);
  auto offset = a->fetch_offset("A.audit", "A.orders", 0);
  ASSERT_TRUE(offset.ok()) << offset.error().describe();
  EXPECT_EQ(*offset, 42);
  auto status = a->describe_group("A.readers");
  ASSERT_TRUE(status.ok()) << status.error().describe();
  ASSERT_EQ(status->members.size(), 1U);
  EXPECT_EQ(status->members[0].member_id, member->member_id);
  auto a_groups = a->list_groups();
  ASSERT_TRUE(a_groups.ok());
  EXPECT_EQ(*a_groups, (std::vector<std::string>{"A.audit", "A.readers"}));
  // The admin sees everything.
  auto all = admin_->list_channels();
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 2U);
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

TEST_F(TenantTest, QuotasRefuseTheCallThatExceedsThemAndChangeNothing) {
  start();
  register_broker();
  const std::string token = create_tenant("A", tenant_quotas(/*channels=*/2, /*partitions=*/3, /*groups=*/1));
  auto a = client(token);
  ASSERT_TRUE(a->create_channel(channel_config("A.one", 2, 1)).ok());

  // Partitions: 2 used, 2 more asked, 3 allowed.
  auto over = a->create_channel(channel_config("A.two", 2, 1));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.code(), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(over.error().message.find("max_partitions is 3: 2 in use"), std::string::npos)
      << over.error().message;
  EXPECT_EQ(tenant_code_of(a->describe_channel("A.two")), idl::ErrorCode::UNKNOWN_CHANNEL);
  auto alter = a->alter_channel("A.one", 4);
  EXPECT_EQ(tenant_code_of(alter), idl::ErrorCode::RESOURCE_EXHAUSTED);
  auto one = a->describe_channel("A.one");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->config.partitions, 2);
  EXPECT_TRUE(one->generations.empty());

  ASSERT_TRUE(a->create_channel(channel_config("A.two", 1, 1)).ok());
  // Channels: 2 of 2.
  auto third = a->create_channel(channel_config("A.three", 1, 1));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.code(), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(third.error().message.find("max_channels"), std::string::npos) << third.error().message;
  // The admin is held to the tenant's quotas in its namespace too.
  EXPECT_EQ(tenant_code_of(admin_->create_channel(channel_config("A.three", 1, 1))),
            idl::ErrorCode::RESOURCE_EXHAUSTED);

  // Groups: one.
  ASSERT_TRUE(a->join_group("A.g1", "A.one", "m", {}).ok());
  ASSERT_TRUE(a->join_group("A.g1", "A.one", "m2", {}).ok()) << "a second member of a known group";
  EXPECT_EQ(tenant_code_of(a->join_group("A.g2", "A.one", "m", {})), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(tenant_code_of(a->commit_offset("A.g3", "A.one", 0, 1)), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(tenant_code_of(a->fetch_offset("A.g3", "A.one", 0)), idl::ErrorCode::NO_OFFSET);
  auto groups = a->list_groups();
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ(*groups, std::vector<std::string>{"A.g1"});

  auto tenants = admin_->list_tenants();
  ASSERT_TRUE(tenants.ok()) << tenants.error().describe();
  ASSERT_EQ(tenants->size(), 1U);
  EXPECT_EQ(tenants->front().channels, 2);
  EXPECT_EQ(tenants->front().partitions, 3);
  EXPECT_EQ(tenants->front().groups, 1);
  EXPECT_EQ(tenants->front().quotas.max_channels, 2);
  EXPECT_TRUE(tenants->front().quotas.zones.empty()) << "any zone";

  // Zones go over Thrift and are checked: named once each, 1..64 characters.
  auto zoned = tenant_quotas(-1, -1, -1);
  zoned.__set_zones({"eu-a", "eu-a"});
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("Z", zoned)), idl::ErrorCode::INVALID_ARGUMENT);
  zoned.__set_zones({"eu-a", ""});
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("Z", zoned)), idl::ErrorCode::INVALID_ARGUMENT);
  zoned.__set_zones({"eu-a", "eu-b"});
  ASSERT_TRUE(admin_->create_tenant("Z", zoned).ok());
  tenants = admin_->list_tenants();
  ASSERT_TRUE(tenants.ok()) << tenants.error().describe();
  ASSERT_EQ(tenants->size(), 2U);
  EXPECT_EQ(tenants->back().name, "Z");
  EXPECT_EQ(tenants->back().quotas.zones, (std::vector<std::string>{"eu-a", "eu-b"}));
  // The registered broker is in no zone: nothing of Z's can be placed.
  auto nowhere = admin_->create_channel(channel_config("Z.x", 1, 1));
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.error().message.find("zones tenant 'Z' allows (eu-a, eu-b)"), std::string::npos)
      << nowhere.error().message;
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

// max_segment_bytes counts replication x segment size over the partitions:
// what one segment slot of every replica takes.
TEST_F(TenantTest, SegmentMemoryQuotaCountsEveryReplicasSegmentAndRefusesTheExcess) {
  start();
  register_broker();
  auto quotas = tenant_quotas(-1, -1, -1);
  quotas.__set_max_segment_bytes(5 << 20);  // 5 MiB
  const std::string token = create_tenant("M", quotas);
  auto m = client(token);
  // 2 partitions x 1 replica x 1 MiB, then 1 x 1 x 2 MiB: 4 MiB of 5.
  ASSERT_TRUE(m->create_channel(channel_config("M.one", 2, 1)).ok());
  auto big = channel_config("M.two", 1, 1);
  big.__set_segment_bytes(2 << 20);
  ASSERT_TRUE(m->create_channel(big).ok());
  // 2 MiB more is refused, whether by size or by partitions.
  big.__set_name("M.three");
  auto over = m->create_channel(big);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.code(), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(
      over.error().message.find("max_segment_bytes is 5242880: 4194304 in use, this call needs 2097152"),
      std::string::npos)
      << over.error().message;
  EXPECT_EQ(tenant_code_of(m->alter_channel("M.two", 2)), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(tenant_code_of(m->describe_channel("M.three")), idl::ErrorCode::UNKNOWN_CHANNEL);
  // Replication counts: 1 MiB segments on 3 replicas need 3 MiB (refused
  // before placement, which one broker could not do anyway).
  auto replicated = m->create_channel(channel_config("M.r3", 1, 3));
  ASSERT_FALSE(replicated.ok());
  EXPECT_NE(replicated.error().message.find(
                "max_segment_bytes is 5242880: 4194304 in use, this call needs 3145728"),
            std::string::npos)
      << replicated.error().message;
  // 1 MiB on one replica fits exactly.
  ASSERT_TRUE(m->create_channel(channel_config("M.four", 1, 1)).ok());
  EXPECT_EQ(tenant_code_of(m->create_channel(channel_config("M.five", 1, 1))),
            idl::ErrorCode::RESOURCE_EXHAUSTED);
  auto tenants = admin_->list_tenants();
  ASSERT_TRUE(tenants.ok()) << tenants.error().describe();
  ASSERT_EQ(tenants->size(), 1U);
  EXPECT_EQ(tenants->front().segment_bytes, 5 << 20);
  EXPECT_EQ(tenants->front().quotas.max_segment_bytes, 5 << 20);
  quotas.__set_max_segment_bytes(-2);
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("N", quotas)), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

// alterTenant replaces the quotas, durably: lowered below the use it
// refuses growth and takes nothing away; raised, it lets growth through;
// zones apply to the next placement. Only the admin may call it.
TEST_F(TenantTest, AlteredQuotasHoldFromTheNextCallAndSurviveARestart) {
  start();
  register_broker();
  const std::string token = create_tenant("A", tenant_quotas(/*channels=*/4, -1, -1));
  auto a = client(token);
  ASSERT_TRUE(a->create_channel(channel_config("A.one", 1, 1)).ok());
  ASSERT_TRUE(a->create_channel(channel_config("A.two", 1, 1)).ok());
  // A tenant may not alter itself (nor anyone).
  EXPECT_EQ(tenant_code_of(a->alter_tenant("A", tenant_quotas(-1, -1, -1))),
            idl::ErrorCode::PERMISSION_DENIED);
  EXPECT_EQ(tenant_code_of(admin_->alter_tenant("nobody", tenant_quotas(-1, -1, -1))),
            idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_EQ(tenant_code_of(admin_->alter_tenant("A", tenant_quotas(-5, -1, -1))),
            idl::ErrorCode::INVALID_ARGUMENT);
  // Below the use: both channels stay, a third is refused.
  ASSERT_TRUE(admin_->alter_tenant("A", tenant_quotas(/*channels=*/1, -1, -1)).ok());
  EXPECT_EQ(tenant_code_of(a->create_channel(channel_config("A.three", 1, 1))),
            idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(a->describe_channel("A.two").ok());
  // Zones: the broker is in no zone, so a zone list leaves nowhere to place.
  auto zoned = tenant_quotas(/*channels=*/3, -1, -1);
  zoned.__set_zones({"eu-a"});
  ASSERT_TRUE(admin_->alter_tenant("A", zoned).ok());
  auto nowhere = a->create_channel(channel_config("A.three", 1, 1));
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.error().message.find("zones tenant 'A' allows (eu-a)"), std::string::npos)
      << nowhere.error().message;
  restart();
  auto tenants = admin_->list_tenants();
  ASSERT_TRUE(tenants.ok()) << tenants.error().describe();
  ASSERT_EQ(tenants->size(), 1U);
  EXPECT_EQ(tenants->front().quotas.max_channels, 3);
  EXPECT_EQ(tenants->front().quotas.zones, std::vector<std::string>{"eu-a"});
  EXPECT_EQ(tenants->front().channels, 2);
  // Any zone again: the third channel fits, a fourth does not.
  ASSERT_TRUE(admin_->alter_tenant("A", tenant_quotas(/*channels=*/3, -1, -1)).ok());
  a = client(token);
  ASSERT_TRUE(a->create_channel(channel_config("A.three", 1, 1)).ok());
  EXPECT_EQ(tenant_code_of(a->create_channel(channel_config("A.four", 1, 1))),
            idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

// The per-node limits (publisher rings, publish rate) travel with every
// assignment of the tenant's partitions, and an alter sends the new ones to
// the nodes already holding them, at the same route epoch.
TEST_F(TenantTest, PerNodeLimitsGoWithEveryAssignmentAndAnAlterSendsThemAgain) {
  start();
  register_broker();
  auto q = tenant_quotas(-1, -1, -1);
  q.__set_max_publish_bytes_per_sec(1000);
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("A", q)), idl::ErrorCode::INVALID_ARGUMENT)
      << "a rate below 4096 bytes/s";
  q.__set_max_publish_bytes_per_sec(1 << 20);
  q.__set_max_publisher_ring_bytes(-2);
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("A", q)), idl::ErrorCode::INVALID_ARGUMENT);
  q.__set_max_publisher_ring_bytes(8 << 20);
  q.__set_max_sessions(-3);
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("A", q)), idl::ErrorCode::INVALID_ARGUMENT);
  q.__set_max_sessions(12);
  const std::string token = create_tenant("A", q);
  ASSERT_TRUE(client(token)->create_channel(channel_config("A.rated", 1, 1)).ok());
  ASSERT_TRUE(admin_->create_channel(channel_config("open", 1, 1)).ok());
  const auto limits_sent = [&](const std::string& channel, std::int64_t rings, std::int64_t rate) {
    return testing::eventually([&] {
      for (const auto& call : broker_->configure_calls()) {
        if (call.route.channel == channel && call.__isset.tenant && call.tenant.tenant == "A" &&
            call.tenant.publisher_ring_bytes == rings && call.tenant.publish_bytes_per_sec == rate &&
            call.tenant.sessions == 12) {
          return true;
        }
      }
      return false;
    });
  };
  EXPECT_TRUE(limits_sent("A.rated", 8 << 20, 1 << 20));
  for (const auto& call : broker_->configure_calls()) {
    if (call.route.channel == "open") {
      EXPECT_FALSE(call.__isset.tenant) << "a channel of no tenant";
    }
  }
  auto before = admin_->get_route("A.rated", 0, 0);
  ASSERT_TRUE(before.ok());
  q.__set_max_publish_bytes_per_sec(64 << 10);
  q.__set_max_publisher_ring_bytes(-1);
  ASSERT_TRUE(admin_->alter_tenant("A", q).ok());
  EXPECT_TRUE(limits_sent("A.rated", -1, 64 << 10)) << "the altered limits were not sent again";
  auto after = admin_->get_route("A.rated", 0, 0);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->epoch, before->epoch);
  EXPECT_EQ(after->access_secret, before->access_secret) << "an alter is not a rotation";
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

TEST_F(TenantTest, ProducerIdQuotaRefusesTheCallBeyondAMinutesWorthForThatTenantOnly) {
  start();
  auto q = tenant_quotas(-1, -1, -1);
  q.__set_max_producer_ids_per_minute(-2);
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("A", q)), idl::ErrorCode::INVALID_ARGUMENT);
  q.__set_max_producer_ids_per_minute(3);
  auto a = client(create_tenant("A", q));
  q.__set_max_producer_ids_per_minute(0);
  auto none = client(create_tenant("N", q));
  auto b = client(create_tenant("B"));

  // A minute's worth (3) at once: issued ids and new epochs of a chosen id
  // both count.
  std::set<std::int64_t> epochs;
  auto issued = a->init_producer(0);
  ASSERT_TRUE(issued.ok()) << issued.error().describe();
  epochs.insert(issued->producer_epoch);
  for (int i = 0; i < 2; ++i) {
    auto again = a->init_producer(42);
    ASSERT_TRUE(again.ok()) << again.error().describe();
    EXPECT_EQ(again->producer_id, 42);
    epochs.insert(again->producer_epoch);
  }
  EXPECT_EQ(epochs.size(), 3U);
  auto beyond = a->init_producer(0);
  ASSERT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.code(), idl::ErrorCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(beyond.error().message.find("max_producer_ids_per_minute is 3"), std::string::npos)
      << beyond.error().describe();

  auto zero = none->init_producer(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.code(), idl::ErrorCode::RESOURCE_EXHAUSTED);
  // Others are not held back: another tenant and the admin go on.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(b->init_producer(0).ok());
    ASSERT_TRUE(admin_->init_producer(0).ok());
  }
  // Lifting the limit lets A go on at once.
  q.__set_max_producer_ids_per_minute(-1);
  ASSERT_TRUE(admin_->alter_tenant("A", q).ok());
  auto after = a->init_producer(42);
  ASSERT_TRUE(after.ok()) << after.error().describe();
  EXPECT_GT(after->producer_epoch, *epochs.rbegin());
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

TEST_F(TenantTest, TokensAreDurableStoredOnlyAsHashesAndRotatable) {
  start();
  register_broker();
  const std::string token = create_tenant("A");
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("A", tenant_quotas(-1, -1, -1))),
            idl::ErrorCode::CHANNEL_EXISTS);
  EXPECT_EQ(tenant_code_of(admin_->create_tenant("A.b", tenant_quotas(-1, -1, -1))),
            idl::ErrorCode::INVALID_ARGUMENT);
  ASSERT_TRUE(client(token)->create_channel(channel_config("A.kept", 1, 1)).ok());

  restart();
  auto a = client(token);
  auto kept = a->describe_channel("A.kept");
  ASSERT_TRUE(kept.ok()) << "the token survives a restart: " << kept.error().describe();
  // Only the hash is on disk (WAL or snapshot), never the token, in hex or raw.
  std::string raw;
  for (std::size_t i = 0; i + 1 < token.size(); i += 2) {
    raw.push_back(static_cast<char>(std::stoi(token.substr(i, 2), nullptr, 16)));
  }
  int files = 0;
  bool hash_found = false;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path() / "data")) {
    if (!entry.is_regular_file()) continue;
    ++files;
    const std::string bytes = slurp_file(entry.path());
    EXPECT_EQ(bytes.find(token), std::string::npos) << entry.path();
    EXPECT_EQ(bytes.find(raw), std::string::npos) << entry.path();
    hash_found = hash_found || bytes.find(token_sha256(token)) != std::string::npos;
  }
  EXPECT_GT(files, 0);
  EXPECT_TRUE(hash_found) << "the metadata holds the token's SHA-256";

  // Delete is refused while A owns a channel.
  EXPECT_EQ(tenant_code_of(admin_->delete_tenant("A")), idl::ErrorCode::INVALID_ARGUMENT);
  // A new token: the old one stops working, on the connection already
  // authenticated with it too.
  auto before = admin_->get_route("A.kept", 0, 0);
  ASSERT_TRUE(before.ok()) << before.error().describe();
  auto fresh = admin_->rotate_tenant_token("A");
  ASSERT_TRUE(fresh.ok()) << fresh.error().describe();
  EXPECT_NE(*fresh, token);
  EXPECT_EQ(tenant_code_of(a->describe_channel("A.kept")), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(tenant_code_of(client(token)->describe_channel("A.kept")), idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_TRUE(client(*fresh)->describe_channel("A.kept").ok());

  // The partition's access secret is a new one, at the same route epoch,
  // and the broker is sent it (the replicas close what the old one opened).
  auto after = client(*fresh)->get_route("A.kept", 0, 0);
  ASSERT_TRUE(after.ok()) << after.error().describe();
  EXPECT_EQ(after->epoch, before->epoch);
  EXPECT_EQ(after->access_secret.size(), before->access_secret.size());
  EXPECT_NE(after->access_secret, before->access_secret);
  EXPECT_TRUE(testing::eventually([&] {
    for (const auto& call : broker_->configure_calls()) {
      if (call.route.channel == "A.kept" && call.access_secret == after->access_secret) return true;
    }
    return false;
  })) << "the new access secret was not pushed";
  restart();
  auto again = client(*fresh)->get_route("A.kept", 0, 0);
  ASSERT_TRUE(again.ok()) << again.error().describe();
  EXPECT_EQ(again->access_secret, after->access_secret) << "the rotation did not survive a restart";
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

TEST_F(TenantTest, AClientAuthenticatesAgainOnEveryNewConnection) {
  // The server closes connections idle for 200 ms: the client's next call
  // goes on a new one, which must authenticate before it.
  start(/*closed=*/true, {"--idle-timeout-ms", "200"});
  register_broker();
  const std::string token = create_tenant("A");
  auto a = client(token);
  ASSERT_TRUE(a->create_channel(channel_config("A.x", 1, 1)).ok());
  for (int i = 0; i < 2; ++i) {
    std::this_thread::sleep_for(500ms);
    auto ch = a->describe_channel("A.x");
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
  }
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

TEST_F(TenantTest, OpenModeNeedsNoTokenAndStillConfinesTenants) {
  start(/*closed=*/false);
  register_broker();
  ASSERT_TRUE(admin_->create_channel(channel_config("legacy", 1, 1)).ok());
  const std::string token = create_tenant("A");
  auto a = client(token);
  EXPECT_TRUE(a->create_channel(channel_config("A.x", 1, 1)).ok());
  EXPECT_EQ(tenant_code_of(a->describe_channel("legacy")), idl::ErrorCode::PERMISSION_DENIED);
  auto all = client("")->list_channels();
  ASSERT_TRUE(all.ok()) << all.error().describe();
  EXPECT_EQ(all->size(), 2U);
  EXPECT_EQ(tenant_code_of(client("")->authenticate("wrong-token-wrong-token")),
            idl::ErrorCode::UNAUTHENTICATED);
  EXPECT_EQ(proc_->stop(SIGTERM), 0);
}

}  // namespace
}  // namespace catena::control
