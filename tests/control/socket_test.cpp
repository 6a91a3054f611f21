// The control plane over real TCP sockets: the Thrift controller server and
// BrokerAdmin servers in this process, then the catena-controller binary.
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <fstream>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <thread>

#include <catena/control/controller_client.hpp>
#include <catena/control/controller_server.hpp>
#include <catena/control/thrift_broker_admin.hpp>
#include <catena/control/thrift_server.hpp>

#include "controller_fixture.hpp"
#include "controller_process.hpp"

namespace catena::control {
namespace {

using namespace std::chrono_literals;
using testing::chain_of;
using testing::channel_config;
using testing::ControllerProcess;
using testing::FakeBroker;
using testing::joining_of;
using testing::TempDir;

// Connects to 127.0.0.1:port, writes bytes, half-closes, and waits for the
// server to close its side. True if the server closed within 5 s.
bool send_raw(std::uint16_t port, const std::string& bytes, bool half_close = true) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return false;
  }
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (half_close) ::shutdown(fd, SHUT_WR);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  ::close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

std::string frame(const std::string& body) {
  const auto len = htonl(static_cast<std::uint32_t>(body.size()));
  return std::string(reinterpret_cast<const char*>(&len), 4) + body;
}

struct Broker {
  std::shared_ptr<FakeBroker> fake;
  std::unique_ptr<ThriftServer> server;
};

class SocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    route_thrift_logs_to_spdlog();
    for (int i = 0; i < 4; ++i) {
      Broker b;
      b.fake = std::make_shared<FakeBroker>("b" + std::to_string(i));
      b.server = make_broker_admin_server(b.fake, {});
      ASSERT_TRUE(b.server->start().ok());
      brokers_.push_back(std::move(b));
    }
    admin_ = std::make_unique<ThriftBrokerAdmin>(ThriftBrokerAdmin::Options{
        std::chrono::milliseconds(1000), std::chrono::milliseconds(2000), std::chrono::milliseconds(1000)});
    Controller::Options o;
    o.data_dir = dir_.path() / "meta";
    o.heartbeat_interval = 100ms;
    // Nobody heartbeats here. A long timeout keeps a loaded machine from
    // turning slow probes into evictions; failures come from reports.
    o.heartbeat_timeout = 60s;
    // A reported node is evicted once its lease has lapsed (lease plus one
    // heartbeat interval after it was last heard from): keep that short.
    o.lease = 200ms;
    auto c = Controller::open(o, clock_, *admin_);
    ASSERT_TRUE(c.ok()) << c.error().describe();
    controller_ = std::move(*c);
    ControllerServer::Options so;
    so.thrift.port = 0;
    so.thrift.idle_timeout = 300ms;
    so.tick_interval = 20ms;
    server_ = std::make_unique<ControllerServer>(*controller_, so);
    ASSERT_TRUE(server_->start().ok());
    ASSERT_NE(server_->port(), 0);
    client_ =
        std::make_unique<ControllerClient>(ControllerClient::Options{server_->address(), 1000ms, 5000ms, {}});
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
    controller_.reset();
  }

  std::string register_broker(int i, const std::string& zone) {
    idl::NodeInfo info;
    info.__set_admin_addr(brokers_[static_cast<std::size_t>(i)].server->address());
    info.__set_fabric_addr("127.0.0.1:" + std::to_string(9000 + i));
    info.__set_zone(zone);
    auto r = client_->register_node(info);
    EXPECT_TRUE(r.ok()) << r.error().describe();
    if (!r.ok()) return "";
    brokers_[static_cast<std::size_t>(i)].fake->set_node_id(r->node_id);
    node_epochs_[r->node_id] = r->node_epoch;
    return r->node_id;
  }

  // One heartbeat of broker i over Thrift, carrying its progress report.
  void heartbeat(int i, const std::string& node_id) {
    idl::HeartbeatRequest hb;
    hb.__set_node_id(node_id);
    hb.__set_node_epoch(node_epochs_.at(node_id));
    hb.__set_stats(brokers_[static_cast<std::size_t>(i)].fake->report());
    auto r = client_->heartbeat(hb);
    ASSERT_TRUE(r.ok()) << r.error().describe();
    EXPECT_FALSE(r->fenced);
  }

  TempDir dir_;
  SteadyClock clock_;
  std::vector<Broker> brokers_;
  std::unique_ptr<ThriftBrokerAdmin> admin_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<ControllerServer> server_;
  std::unique_ptr<ControllerClient> client_;
  std::map<std::string, std::int64_t> node_epochs_;
};

// A route as brokers are given it: clients get the partition's access
// secret with it too.
idl::PartitionRoute without_secret(idl::PartitionRoute r) {
  r.access_secret.clear();
  r.__isset.access_secret = false;
  return r;
}

TEST_F(SocketTest, ChannelsRoutesAndTypedErrorsOverThrift) {
  for (int i = 0; i < 3; ++i) register_broker(i, "z" + std::to_string(i));
  auto ch = client_->create_channel(channel_config("trades", 2, 3));
  ASSERT_TRUE(ch.ok()) << ch.error().describe();
  ASSERT_EQ(ch->routes.size(), 2u);
  // createChannel returns after pushing: every broker has both partitions.
  for (int i = 0; i < 3; ++i) {
    for (int p = 0; p < 2; ++p) {
      auto installed = brokers_[static_cast<std::size_t>(i)].fake->installed("trades", p);
      ASSERT_TRUE(installed.has_value()) << "broker " << i << " partition " << p;
      // What clients get carries the partition's access secret on top.
      const auto& given = ch->routes[static_cast<std::size_t>(p)];
      EXPECT_EQ(*installed, without_secret(given));
      EXPECT_EQ(given.access_secret.size(), 16u);
    }
  }
  auto route = client_->get_route("trades", 1);
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(*route, ch->routes[1]);
  EXPECT_NE(route->access_secret, ch->routes[0].access_secret) << "each partition has its own";
  EXPECT_EQ(route->epoch, 1);
  // Placement spreads the heads: partition 0's is broker 0, partition 1's broker 1.
  EXPECT_EQ(ch->routes[0].replicas.front().admin_addr, brokers_[0].server->address());
  EXPECT_EQ(route->replicas.front().admin_addr, brokers_[1].server->address());
  auto described = client_->describe_channel("trades");
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(described->config.segment_bytes, 1 << 20);
  EXPECT_EQ(client_->list_channels()->size(), 1u);
  EXPECT_EQ(client_->cluster_status()->nodes.size(), 3u);

  auto unknown = client_->get_route("nope", 0);
  EXPECT_EQ(unknown.code(), idl::ErrorCode::UNKNOWN_CHANNEL);
  EXPECT_NE(unknown.error().message.find("nope"), std::string::npos);

  idl::FailureReport stale;
  stale.__set_reporter("test");
  stale.__set_suspect_node_id(route->replicas[1].node_id);
  stale.__set_channel("trades");
  stale.__set_partition(1);
  stale.__set_epoch(0);
  auto refused = client_->report_failure(stale);
  ASSERT_EQ(refused.code(), idl::ErrorCode::STALE_EPOCH);
  ASSERT_TRUE(refused.error().current_route.has_value());
  EXPECT_EQ(*refused.error().current_route, *route);

  auto invalid = client_->create_channel(channel_config("bad/name"));
  EXPECT_EQ(invalid.code(), idl::ErrorCode::INVALID_ARGUMENT);
  EXPECT_NE(invalid.error().message.find("channel name"), std::string::npos);
  EXPECT_EQ(client_->create_channel(channel_config("trades")).code(), idl::ErrorCode::CHANNEL_EXISTS);
  EXPECT_EQ(client_->create_channel(channel_config("big", 1, 7)).code(), idl::ErrorCode::NOT_ENOUGH_NODES);

  idl::HeartbeatRequest hb;
  hb.__set_node_id("node-77");
  EXPECT_EQ(client_->heartbeat(hb).code(), idl::ErrorCode::UNKNOWN_NODE);

  EXPECT_EQ(client_->fetch_offset("readers", "trades", 1).code(), idl::ErrorCode::NO_OFFSET);
  ASSERT_TRUE(client_->commit_offset("readers", "trades", 1, 4242).ok());
  auto offset = client_->fetch_offset("readers", "trades", 1);
  ASSERT_TRUE(offset.ok());
  EXPECT_EQ(*offset, 4242);

  auto first = client_->init_producer(5);
  ASSERT_TRUE(first.ok()) << first.error().describe();
  auto second = client_->init_producer(5);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->producer_id, 5);
  EXPECT_GT(second->producer_epoch, first->producer_epoch);
  EXPECT_EQ(client_->init_producer(-3).code(), idl::ErrorCode::INVALID_ARGUMENT);
}

// Failure reports wake the maintenance loop early, but a flood of them (a
// client reporting in a loop) gets one early tick per gap, not one per
// report: the controller does not tick back to back.
TEST_F(SocketTest, AFloodOfTickRequestsIsCoalescedIntoFewTicks) {
  server_->stop();  // one maintenance loop on the controller at a time
  ControllerServer::Options so;
  so.thrift.port = 0;
  so.tick_interval = 60s;  // no periodic tick during the test: only requested ones
  ControllerServer server(*controller_, so);
  ASSERT_TRUE(server.start().ok());
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server.ticks() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(server.ticks(), 1u);  // the one at start
  server.tick_now();
  while (server.ticks() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(server.ticks(), 2u) << "a request was not served at once";
  // 200 ms of requests, one every 100 us: with a gap of 6 s / 10 capped at
  // 10 ms, at most ~21 more ticks; without the gap, hundreds.
  const auto start = std::chrono::steady_clock::now();
  int requests = 0;
  while (std::chrono::steady_clock::now() - start < 200ms) {
    server.tick_now();
    ++requests;
    std::this_thread::sleep_for(100us);
  }
  std::this_thread::sleep_for(50ms);  // the last requested tick runs
  const auto elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  const std::uint64_t early = server.ticks() - 2;
  EXPECT_GE(early, 1u);
  EXPECT_LE(early, static_cast<std::uint64_t>(elapsed.count() / 10 + 2)) << requests << " requests";
  server.stop();
}

TEST_F(SocketTest, GarbageOnThePortDoesNotHurtTheServer) {
  register_broker(0, "z0");
  register_broker(1, "z1");
  ASSERT_TRUE(client_->create_channel(channel_config("c", 1, 2)).ok());
  std::mt19937 rng(7);
  std::string random_bytes(4096, '\0');
  for (auto& c : random_bytes) c = static_cast<char>(rng());
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"random bytes", random_bytes},
      {"frame claiming 2 GiB", std::string("\x7f\xff\xff\xff", 4) + "xyz"},
      {"negative frame size", std::string("\xff\xff\xff\xf0", 4)},
      {"valid frame, garbage inside", frame(random_bytes.substr(0, 200))},
      {"valid frame, unversioned message", frame(std::string("\x00\x00\x00\x05hello\x01", 10))},
      {"huge string length", frame(std::string("\x80\x01\x00\x01\x00\x00\x00\x08getRoute\x00\x00\x00\x00"
                                               "\x0b\x00\x01\x7f\xff\xff\xff",
                                               26))},
      // A field header whose type byte (0x46) names no Thrift type: the
      // generated code switched on it as a TType, undefined behaviour that
      // stopped the sanitizer builds (found by catena-fuzz-controller-request).
      {"unknown field type", frame(std::string("\x80\x01\x00\x01\x00\x00\x00\x0clistChannels\x00\x00\x00\x01"
                                               "\x46\x00\x01\x00",
                                               28))},
      {"unknown list element type", frame(std::string("\x80\x01\x00\x01\x00\x00\x00\x0dmovePartition"
                                                      "\x00\x00\x00\x01\x0f\x00\x03\x46\x00\x00\x00\x01\x00",
                                                      34))},
      {"unknown message type",
       frame(std::string("\x80\x01\x00\x09\x00\x00\x00\x0clistChannels\x00\x00\x00\x01\x00", 25))},
      {"http request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
      {"half a frame", std::string("\x00\x00\x01\x00", 4) + "abc"},
      {"nothing at all", ""},
  };
  for (const auto& [what, bytes] : attacks) {
    EXPECT_TRUE(send_raw(server_->port(), bytes)) << what << ": the server should drop the connection";
    auto r = client_->get_route("c", 0);
    ASSERT_TRUE(r.ok()) << "after " << what << ": " << r.error().describe();
  }
  ControllerClient fresh({server_->address(), 1000ms, 5000ms, {}});
  EXPECT_TRUE(fresh.get_route("c", 0).ok());
}

TEST_F(SocketTest, ClientReconnectsAfterTheServerClosedAnIdleConnection) {
  register_broker(0, "z0");
  std::this_thread::sleep_for(600ms);  // twice the server's idle timeout
  auto r = client_->cluster_status();
  ASSERT_TRUE(r.ok()) << r.error().describe();
  EXPECT_EQ(r->nodes.size(), 1u);
}

TEST_F(SocketTest, UnreachableControllerIsUnavailable) {
  ControllerClient nobody({"127.0.0.1:1", 200ms, 200ms, {}});
  EXPECT_EQ(nobody.list_channels().code(), idl::ErrorCode::UNAVAILABLE);
  EXPECT_EQ(ControllerClient::connect({"127.0.0.1:1", 200ms, 200ms, {}}).code(), idl::ErrorCode::UNAVAILABLE);
}

TEST_F(SocketTest, StoppedBrokerIsProbedOverThriftEvictedAndReplaced) {
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(register_broker(i, "z" + std::to_string(i)));
  ASSERT_TRUE(client_->create_channel(channel_config("c", 1, 3)).ok());
  const auto spare = register_broker(3, "z1");
  brokers_[1].server->stop();  // the middle replica's process dies

  idl::FailureReport report;
  report.__set_reporter(ids[0]);
  report.__set_suspect_node_id(ids[1]);
  report.__set_channel("c");
  report.__set_partition(0);
  report.__set_epoch(1);
  report.__set_reason("cannot write to successor");
  ASSERT_TRUE(client_->report_failure(report).ok());

  ASSERT_TRUE(testing::eventually([&] {
    auto r = client_->get_route("c", 0);
    return r.ok() && r->epoch == 3;
  })) << "no replacement joining";
  const auto joining = *client_->get_route("c", 0);
  EXPECT_EQ(chain_of(joining), (std::vector<std::string>{ids[0], ids[2]}));
  EXPECT_EQ(joining_of(joining), (std::vector<std::string>{spare}));
  // The tail's heartbeat, over Thrift, reports the spare caught up.
  ASSERT_TRUE(testing::eventually([&] {
    heartbeat(2, ids[2]);
    auto r = client_->get_route("c", 0);
    return r.ok() && r->epoch == 4;
  })) << "the joining replacement was not promoted";
  const auto r = *client_->get_route("c", 0);
  EXPECT_EQ(chain_of(r), (std::vector<std::string>{ids[0], ids[2], spare}));
  EXPECT_TRUE(r.joining.empty());
  EXPECT_TRUE(testing::eventually([&] {
    auto installed = brokers_[3].fake->installed("c", 0);
    return installed && *installed == without_secret(r);
  }));
  const auto status = client_->cluster_status();
  ASSERT_TRUE(status.ok());
  for (const auto& s : status->nodes) {
    EXPECT_EQ(s.state, s.info.node_id == ids[1] ? idl::NodeState::DEAD : idl::NodeState::ALIVE)
        << s.info.node_id;
  }
}

// ---- the catena-controller binary -------------------------------------------

TEST(ControllerBinary, ServesSurvivesGarbageStopsCleanlyAndPersists) {
  TempDir dir;
  auto broker = std::make_shared<FakeBroker>("b");
  auto broker_server = make_broker_admin_server(broker, {});
  ASSERT_TRUE(broker_server->start().ok());

  std::string node_id;
  std::int64_t node_epoch = 0;
  {
    ControllerProcess proc(dir.path() / "data", dir.path() / "port");
    ASSERT_TRUE(proc.spawned());
    const auto port = proc.wait_for_port();
    ASSERT_NE(port, 0) << "catena-controller did not start";
    auto client = ControllerClient::connect({"127.0.0.1:" + std::to_string(port), 1000ms, 5000ms, {}});
    ASSERT_TRUE(client.ok()) << client.error().describe();
    idl::NodeInfo info;
    info.__set_admin_addr(broker_server->address());
    info.__set_fabric_addr("127.0.0.1:9999");
    auto reg = (*client)->register_node(info);
    ASSERT_TRUE(reg.ok()) << reg.error().describe();
    node_id = reg->node_id;
    node_epoch = reg->node_epoch;
    auto ch = (*client)->create_channel(channel_config("solo", 1, 1));
    ASSERT_TRUE(ch.ok()) << ch.error().describe();
    EXPECT_TRUE(broker->installed("solo", 0).has_value());

    std::string junk(2048, '\0');
    std::mt19937 rng(11);
    for (auto& c : junk) c = static_cast<char>(rng());
    EXPECT_TRUE(send_raw(port, junk));
    auto route = (*client)->get_route("solo", 0);
    ASSERT_TRUE(route.ok()) << route.error().describe();
    EXPECT_EQ(route->replicas[0].node_id, node_id);

    // A second controller on the same data directory refuses to start.
    ControllerProcess rival(dir.path() / "data", dir.path() / "port2");
    EXPECT_NE(rival.wait_exit(), 0);

    EXPECT_EQ(proc.stop(SIGTERM), 0);
  }
  {
    ControllerProcess proc(dir.path() / "data", dir.path() / "port");
    const auto port = proc.wait_for_port();
    ASSERT_NE(port, 0);
    ControllerClient client({"127.0.0.1:" + std::to_string(port), 1000ms, 5000ms, {}});
    auto route = client.get_route("solo", 0);
    ASSERT_TRUE(route.ok()) << route.error().describe();
    EXPECT_EQ(route->replicas[0].node_id, node_id);
    idl::HeartbeatRequest hb;
    hb.__set_node_id(node_id);
    hb.__set_node_epoch(node_epoch);
    auto beat = client.heartbeat(hb);
    ASSERT_TRUE(beat.ok());
    EXPECT_FALSE(beat->fenced) << "a controller restart does not fence healthy nodes";
    EXPECT_EQ(proc.stop(SIGINT), 0);
  }
}

}  // namespace
}  // namespace catena::control
