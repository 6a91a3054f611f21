// Several controllers on one zk:// location (ControllerCandidate: ZkElection
// + ControllerServer), each behind its own Thrift server on a real socket,
// the brokers FakeBrokers behind real BrokerAdmin servers, ZooKeeper a real
// server: one leader, followers answering NOT_LEADER naming it, clients
// following that, and a takeover when the leader goes.
#include <gtest/gtest.h>
#include <thread>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

#include <catena/control/controller_candidate.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/control/idl/Controller.h>
#include <catena/control/thrift_broker_admin.hpp>
#include <catena/control/thrift_server.hpp>
#include <catena/control/zk_metadata_store.hpp>

#include "controller_fixture.hpp"
#include "controller_process.hpp"
#include "zk_server.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::channel_config;
using testing::FakeBroker;

// One Controller call straight over Thrift (no ControllerClient, so no
// redirect): the CatenaError the server at port answered clusterStatus
// with, or nullopt if it answered.
std::optional<idl::CatenaError> raw_cluster_status(std::uint16_t port) {
  using namespace apache::thrift;
  auto socket = std::make_shared<transport::TSocket>("127.0.0.1", port);
  auto framed = std::make_shared<transport::TFramedTransport>(socket);
  idl::ControllerClient client(std::make_shared<protocol::TBinaryProtocol>(framed));
  framed->open();
  try {
    idl::ClusterStatus out;
    client.clusterStatus(out);
  } catch (const idl::CatenaError& e) {
    return e;
  }
  return std::nullopt;
}

class ElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    route_thrift_logs_to_spdlog();
    ZK_METADATA_OR_SKIP(metadata_);
    for (int i = 0; i < 3; ++i) {
      auto fake = std::make_shared<FakeBroker>("b" + std::to_string(i));
      auto server = make_broker_admin_server(fake, {});
      ASSERT_TRUE(server->start().ok());
      fakes_.push_back(std::move(fake));
      broker_servers_.push_back(std::move(server));
    }
    admin_ = std::make_unique<ThriftBrokerAdmin>(ThriftBrokerAdmin::Options{1000ms, 2000ms, 1000ms});
  }

  void TearDown() override {
    candidates_.clear();
    broker_servers_.clear();
  }

  // Starts one more controller on the location; its index.
  std::size_t start_candidate() {
    ControllerCandidate::Options o;
    o.controller.metadata = metadata_;
    o.controller.heartbeat_interval = 100ms;
    o.controller.heartbeat_timeout = 60s;  // nobody heartbeats here
    o.controller.lease = 200ms;
    o.server.thrift.port = 0;
    o.server.tick_interval = 20ms;
    o.session_timeout = session_timeout_;  // the test server's least is 2 x tickTime (500 ms)
    o.connect_timeout = 5000ms;
    o.controller.zk_session_timeout = session_timeout_;
    o.controller.zk_connect_timeout = store_connect_timeout_;
    o.on_lost = [this](const ControlError& why) {
      MutexLock lock(mu_);
      lost_.push_back(why.message);
    };
    auto c = ControllerCandidate::start(std::move(o), clock_, *admin_);
    EXPECT_TRUE(c.ok()) << c.error().describe();
    if (!c.ok()) return 0;
    candidates_.push_back(std::move(*c));
    return candidates_.size() - 1;
  }

  // The indexes of the live candidates that lead.
  std::vector<std::size_t> leaders() const {
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      if (candidates_[i] && candidates_[i]->controller()) out.push_back(i);
    }
    return out;
  }

  std::string all_addresses() const {
    std::string list;
    for (const auto& c : candidates_) {
      if (!list.empty()) list += ',';
      list += c->address();
    }
    return list;
  }

  void register_brokers(ControllerClient& client) {
    for (std::size_t i = 0; i < fakes_.size(); ++i) {
      idl::NodeInfo info;
      info.__set_admin_addr(broker_servers_[i]->address());
      info.__set_fabric_addr("127.0.0.1:" + std::to_string(9100 + i));
      info.__set_zone("z" + std::to_string(i));
      auto r = client.register_node(info);
      ASSERT_TRUE(r.ok()) << r.error().describe();
      fakes_[i]->set_node_id(r->node_id);
    }
  }

  template <class Pred>
  static bool eventually(Pred pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return pred();
  }

  std::string metadata_;
  std::chrono::milliseconds session_timeout_{2000};
  std::chrono::milliseconds store_connect_timeout_{10000};
  SteadyClock clock_;
  std::vector<std::shared_ptr<FakeBroker>> fakes_;
  std::vector<std::unique_ptr<ThriftServer>> broker_servers_;
  std::unique_ptr<ThriftBrokerAdmin> admin_;
  std::vector<std::unique_ptr<ControllerCandidate>> candidates_;
  Mutex mu_;
  std::vector<std::string> lost_ GUARDED_BY(mu_);
};

TEST_F(ElectionTest, OneLeaderAndFollowersAnswerNotLeaderNamingIt) {
  for (int i = 0; i < 3; ++i) start_candidate();
  ASSERT_EQ(candidates_.size(), 3u);
  // The first to join holds the lowest sequence.
  ASSERT_EQ(leaders(), std::vector<std::size_t>{0});
  const std::string leader = candidates_[0]->address();

  auto leader_answer = raw_cluster_status(candidates_[0]->port());
  EXPECT_FALSE(leader_answer.has_value()) << leader_answer->message;
  for (std::size_t f : {1u, 2u}) {
    auto refused = raw_cluster_status(candidates_[f]->port());
    ASSERT_TRUE(refused.has_value()) << "follower " << f << " served";
    EXPECT_EQ(refused->code, idl::ErrorCode::NOT_LEADER);
    ASSERT_TRUE(refused->__isset.leader_address);
    EXPECT_EQ(refused->leader_address, leader);
    EXPECT_NE(refused->message.find(leader), std::string::npos) << refused->message;
  }

  // A client that knows only a follower is sent to the leader and stays.
  ControllerClient via_follower({candidates_[2]->address(), 1000ms, 5000ms, {}});
  register_brokers(via_follower);
  EXPECT_EQ(via_follower.address(), leader);
  auto created = via_follower.create_channel(channel_config("orders", 1, 3));
  ASSERT_TRUE(created.ok()) << created.error().describe();
  // Only the leader holds it; the followers opened no store at all.
  EXPECT_TRUE(candidates_[0]->controller()->describe_channel("orders").ok());
  EXPECT_EQ(candidates_[1]->controller(), nullptr);

  // A list whose first entries are a dead address and a follower reaches
  // the leader too.
  ControllerClient listed({"127.0.0.1:1," + candidates_[1]->address() + "," + leader, 500ms, 5000ms, {}});
  auto described = listed.describe_channel("orders");
  ASSERT_TRUE(described.ok()) << described.error().describe();
  EXPECT_EQ(described->routes.size(), 1u);
  EXPECT_EQ(listed.address(), leader);
}

TEST_F(ElectionTest, AFollowerTakesOverWithTheStateWhenTheLeaderGoes) {
  for (int i = 0; i < 3; ++i) start_candidate();
  ASSERT_EQ(candidates_.size(), 3u);
  ASSERT_EQ(leaders(), std::vector<std::size_t>{0});
  ControllerClient client({all_addresses(), 1000ms, 5000ms, {}});
  register_brokers(client);
  auto created = client.create_channel(channel_config("orders", 2, 3));
  ASSERT_TRUE(created.ok()) << created.error().describe();
  const std::string first = candidates_[0]->address();
  EXPECT_EQ(client.address(), first);

  // The leader goes: its session closes, so its znode goes at once.
  const auto stopped_at = std::chrono::steady_clock::now();
  candidates_[0]->stop();
  ASSERT_TRUE(eventually([&] { return leaders() == std::vector<std::size_t>{1}; }, 10s))
      << "leaders: " << leaders().size();
  const auto took = std::chrono::steady_clock::now() - stopped_at;
  EXPECT_LT(took, 5s);
  std::printf("takeover after the leader stopped: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  const std::string second = candidates_[1]->address();

  // The third now names the new leader.
  ASSERT_TRUE(eventually(
      [&] {
        auto a = raw_cluster_status(candidates_[2]->port());
        return a && a->code == idl::ErrorCode::NOT_LEADER && a->leader_address == second;
      },
      5s));
  // The client's connection to the stopped leader is gone: it tries the
  // next address.
  auto described = client.describe_channel("orders");
  ASSERT_TRUE(described.ok()) << described.error().describe();
  EXPECT_EQ(client.address(), second);
  EXPECT_EQ(described->routes, created->routes);
  // And it writes: the new leader's epoch is the newer one.
  auto again = client.create_channel(channel_config("trades", 1, 3));
  ASSERT_TRUE(again.ok()) << again.error().describe();
  EXPECT_EQ(client.list_channels()->size(), 2u);
}

TEST_F(ElectionTest, TheOldLeadersStoreIsFencedOnceAFollowerLeads) {
  for (int i = 0; i < 2; ++i) start_candidate();
  ASSERT_EQ(candidates_.size(), 2u);
  ASSERT_EQ(leaders(), std::vector<std::size_t>{0});
  // Keep the old leader's Controller (its store, its epoch) past its stop,
  // as a process paused through the takeover would.
  auto old_controller = candidates_[0]->controller();
  ControllerClient client({all_addresses(), 1000ms, 5000ms, {}});
  register_brokers(client);
  candidates_[0]->stop();
  ASSERT_TRUE(eventually([&] { return leaders() == std::vector<std::size_t>{1}; }, 10s));

  auto refused = old_controller->create_channel(channel_config("late", 1, 3));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), idl::ErrorCode::NOT_LEADER);
  EXPECT_NE(refused.error().message.find("fenced"), std::string::npos) << refused.error().message;
  EXPECT_EQ(client.describe_channel("late").code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_EQ(client.address(), candidates_[1]->address());
}

TEST_F(ElectionTest, ALeaderThatLosesItsSessionHalts) {
  // A ZooKeeper server of its own, killed under the leader: no connection
  // for a whole session timeout, so the leader halts.
  std::string why;
  auto zk = testing::ZkServer::start(&why);
  ZK_OR_SKIP(zk.get(), why);
  metadata_ = zk->uri(testing::unique_chroot("halt"));
  start_candidate();
  ASSERT_EQ(leaders(), std::vector<std::size_t>{0});
  zk->kill();
  ASSERT_TRUE(eventually([&] { return leaders().empty(); }, 10s)) << "the leader went on serving";
  auto answer = raw_cluster_status(candidates_[0]->port());
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code, idl::ErrorCode::NOT_LEADER);
  EXPECT_FALSE(answer->__isset.leader_address);
  // on_lost is called just after the halt.
  ASSERT_TRUE(eventually(
      [&] {
        MutexLock lock(mu_);
        return !lost_.empty();
      },
      5s));
  MutexLock lock(mu_);
  ASSERT_EQ(lost_.size(), 1u);
  EXPECT_NE(lost_.front().find("ZooKeeper session"), std::string::npos) << lost_.front();
}

TEST_F(ElectionTest, ALeaderWhoseStoreFailedResignsAndAnotherLeads) {
  // ZooKeeper away for longer than the store's connect timeout while the
  // leader commits: the leader cannot learn whether its change was applied,
  // so its store fails for good. Seen in CI (ZkEnsemble, a ZooKeeper restart
  // slowed by a loaded machine): the leader stayed leader, refusing every
  // write and every lease, for as long as the test waited. It must resign
  // once ZooKeeper is back: another candidate leads with the metadata read
  // afresh, and this one stays a candidate.
  std::string why;
  auto zk = testing::ZkServer::start(&why);
  ZK_OR_SKIP(zk.get(), why);
  metadata_ = zk->uri(testing::unique_chroot("resign"));
  session_timeout_ = 15000ms;  // outlives the outage
  store_connect_timeout_ = 500ms;
  for (int i = 0; i < 2; ++i) start_candidate();
  ASSERT_EQ(leaders(), std::vector<std::size_t>{0});
  ControllerClient client({all_addresses(), 1000ms, 5000ms, {}});
  register_brokers(client);
  ASSERT_TRUE(client.create_channel(channel_config("before", 1, 3)).ok());

  zk->kill();
  auto first = candidates_[0]->controller();
  auto lost = first->create_channel(channel_config("during", 1, 3));
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.code(), idl::ErrorCode::UNAVAILABLE) << lost.error().describe();
  EXPECT_NE(lost.error().message.find("outcome is unknown"), std::string::npos) << lost.error().message;
  EXPECT_TRUE(first->metadata_failed());
  ASSERT_TRUE(zk->restart(&why)) << why;

  bool created = false;
  EXPECT_TRUE(eventually(
      [&] { return created = created || client.create_channel(channel_config("after", 1, 3)).ok(); }, 15s))
      << "no controller wrote after ZooKeeper was back";
  EXPECT_EQ(leaders(), std::vector<std::size_t>{1});
  EXPECT_EQ(client.address(), candidates_[1]->address());
  EXPECT_TRUE(client.describe_channel("before").ok());
  {
    MutexLock lock(mu_);
    EXPECT_TRUE(lost_.empty()) << lost_.front();
  }
  // The first is a candidate still, behind the second: it leads again,
  // with what the second wrote, once the second goes.
  EXPECT_TRUE(eventually([&] { return candidates_[0]->leader_address() == candidates_[1]->address(); }, 5s));
  candidates_[1]->stop();
  ASSERT_TRUE(eventually([&] { return leaders() == std::vector<std::size_t>{0}; }, 10s));
  EXPECT_TRUE(candidates_[0]->controller()->describe_channel("after").ok());
  EXPECT_FALSE(candidates_[0]->controller()->metadata_failed());
}

TEST(ElectionBinary, ASigkilledLeaderIsReplacedOnceItsSessionTimesOut) {
  route_thrift_logs_to_spdlog();
  std::string why;
  auto* zk = testing::shared_zk(&why);
  ZK_OR_SKIP(zk, why);
  const std::string uri = zk->uri(testing::unique_chroot("binary"));
  testing::TempDir dir;
  auto broker = std::make_shared<FakeBroker>("b");
  auto broker_server = make_broker_admin_server(broker, {});
  ASSERT_TRUE(broker_server->start().ok());

  // Sessions of 3 s (the default is 10 s): the takeover below must come
  // after about that, so the flag is seen to reach the ZooKeeper client.
  testing::ControllerProcess first({"--metadata", uri, "--zk-session-timeout-ms", "3000"},
                                   dir.path() / "port-a");
  const auto port_a = first.wait_for_port();
  ASSERT_NE(port_a, 0) << "the first catena-controller did not start";
  testing::ControllerProcess second({"--metadata", uri, "--zk-session-timeout-ms", "3000"},
                                    dir.path() / "port-b");
  const auto port_b = second.wait_for_port();
  ASSERT_NE(port_b, 0) << "the second catena-controller did not start";
  const std::string a = "127.0.0.1:" + std::to_string(port_a);
  const std::string b = "127.0.0.1:" + std::to_string(port_b);

  auto follower = raw_cluster_status(port_b);
  ASSERT_TRUE(follower.has_value()) << "the second controller serves too";
  EXPECT_EQ(follower->code, idl::ErrorCode::NOT_LEADER);
  EXPECT_EQ(follower->leader_address, a);

  ControllerClient client({b + "," + a, 1000ms, 5000ms, {}});
  idl::NodeInfo info;
  info.__set_admin_addr(broker_server->address());
  info.__set_fabric_addr("127.0.0.1:9999");
  auto reg = client.register_node(info);
  ASSERT_TRUE(reg.ok()) << reg.error().describe();
  EXPECT_EQ(client.address(), a);

  // A crash: the session lives on until ZooKeeper times it out (3 s).
  ::kill(first.pid(), SIGKILL);
  EXPECT_EQ(first.wait_exit(), 128 + SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(testing::process_eventually(
      [&] {
        auto status = client.cluster_status();
        return status.ok() && status->nodes.size() == 1;
      },
      30s))
      << "no takeover";
  const auto took = std::chrono::steady_clock::now() - killed_at;
  std::printf("takeover after SIGKILL of the leader: %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  EXPECT_GE(took, 2s) << "taken over before the dead leader's session could have expired";
  EXPECT_LT(took, 10s) << "the session was not the 3 s asked for";
  EXPECT_EQ(client.address(), b);
  EXPECT_EQ(client.cluster_status()->nodes.front().info.node_id, reg->node_id);
  EXPECT_EQ(second.stop(SIGTERM), 0);
}

TEST(ControllerClientList, OneAddressAnsweringNotLeaderWithoutALeaderIsReturnedAsIs) {
  // One address: nowhere else to ask, so the answer comes back unchanged.
  auto role = std::make_shared<ControllerRole>();
  ControllerServer::Options so;
  so.thrift.port = 0;
  so.tick_interval = 0ms;
  ControllerServer server(role, so);
  ASSERT_TRUE(server.start().ok());
  ControllerClient client({server.address(), 1000ms, 2000ms, {}});
  auto r = client.cluster_status();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::NOT_LEADER);
  EXPECT_FALSE(r.error().leader_address.has_value());
  // A follower naming a leader that is itself: not followed in a loop.
  role->follow(server.address());
  auto self = client.cluster_status();
  EXPECT_EQ(self.code(), idl::ErrorCode::NOT_LEADER);
  ASSERT_TRUE(self.error().leader_address.has_value());
  EXPECT_EQ(*self.error().leader_address, server.address());
}

TEST(ControllerClientList, AMalformedListIsAClearError) {
  ControllerClient client({"127.0.0.1:7400,nonsense", 200ms, 200ms, {}});
  auto r = client.cluster_status();
  EXPECT_EQ(r.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message.find("nonsense"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace catena::control
