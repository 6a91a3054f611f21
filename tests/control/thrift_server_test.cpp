// ThriftServer over real sockets: many connections on few threads, bad
// frames, the idle timeout, a processor per connection, max_connections,
// and stop() while a handler is blocked. The service is BrokerAdmin with a
// handler per connection that remembers what its connection told it.
#include <unistd.h>

#include <arpa/inet.h>
#include <array>
#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <mutex>
#include <netinet/in.h>
#include <random>
#include <sys/socket.h>
#include <thread>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TSocket.h>

#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/thrift_server.hpp>

#include "test_support.hpp"

namespace catena::control {
namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;
using namespace std::chrono_literals;

// What every handler of one server shares: counts, the peers it was told,
// and a gate that fence("block", ...) waits at.
struct Shared {
  std::atomic<int> made{0};
  std::atomic<int> released{0};
  std::atomic<int> blocked{0};  // handlers waiting at the gate
  std::mutex mu;
  std::condition_variable cv;
  bool gate_open = false;
  std::vector<std::string> origins;
  bool protocols_given = true;

  void open_gate() {
    {
      std::lock_guard lock(mu);
      gate_open = true;
    }
    cv.notify_all();
  }
};

// One connection's handler: authenticate(_, epoch) sets its state, ping()
// answers it (connections = that epoch, -1 before; segments = its serial).
class ConnectionHandler final : public idl::BrokerAdminIf {
 public:
  ConnectionHandler(Shared& shared, int serial) : shared_(shared), serial_(serial) {}
  void authenticate(const std::string& /*secret*/, std::int64_t epoch) override { epoch_ = epoch; }
  void configureChain(const idl::ChainAssignment& /*assignment*/) override {}
  void fence(const std::string& channel, std::int32_t /*partition*/, std::int64_t /*epoch*/) override {
    if (channel != "block") return;
    std::unique_lock lock(shared_.mu);
    ++shared_.blocked;
    shared_.cv.wait(lock, [this] { return shared_.gate_open; });
    --shared_.blocked;
  }
  void ping(idl::NodeStats& out) override {
    out.__set_connections(epoch_);
    out.__set_segments(serial_);
  }
  void seal(idl::SealReply& /*out*/, const std::string& /*channel*/, std::int32_t /*partition*/,
            std::int64_t /*epoch*/) override {}
  void appendMarker(idl::MarkerReply& /*out*/, const std::string& /*channel*/, std::int32_t /*partition*/,
                    std::int64_t /*epoch*/, std::int32_t /*generation*/, std::int32_t /*from*/,
                    std::int32_t /*to*/) override {}

 private:
  Shared& shared_;
  const int serial_;
  std::int64_t epoch_ = -1;
};

class Factory final : public idl::BrokerAdminIfFactory {
 public:
  explicit Factory(Shared& shared) : shared_(shared) {}
  idl::BrokerAdminIf* getHandler(const apache::thrift::TConnectionInfo& info) override {
    const int serial = shared_.made++;
    std::lock_guard lock(shared_.mu);
    if (!info.input || !info.output || info.input == info.output) shared_.protocols_given = false;
    shared_.origins.push_back(info.transport ? info.transport->getOrigin() : "");
    return new ConnectionHandler(shared_, serial);
  }
  void releaseHandler(idl::BrokerAdminIf* handler) override {
    ++shared_.released;
    delete handler;
  }

 private:
  Shared& shared_;
};

struct Client {
  std::shared_ptr<TSocket> socket;
  std::shared_ptr<TFramedTransport> transport;
  std::unique_ptr<idl::BrokerAdminClient> rpc;
};

Client connect_client(std::uint16_t port) {
  Client c;
  c.socket = std::make_shared<TSocket>("127.0.0.1", port);
  c.socket->setRecvTimeout(10000);
  c.socket->setSendTimeout(10000);
  c.transport = std::make_shared<TFramedTransport>(c.socket);
  c.rpc = std::make_unique<idl::BrokerAdminClient>(std::make_shared<TBinaryProtocol>(c.transport));
  c.transport->open();
  return c;
}

std::int64_t ping_connections(Client& c) {
  idl::NodeStats s;
  c.rpc->ping(s);
  return s.connections;
}

int raw_connect(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True if the server closes fd (EOF or reset) within `within`; the socket
// stays open on our side meanwhile, so only the server can end it.
bool server_closes(int fd, std::chrono::milliseconds within) {
  timeval tv{static_cast<time_t>(within.count() / 1000),
             static_cast<suseconds_t>((within.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  ssize_t n = 0;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

std::string be32(std::uint32_t v) {
  const auto n = htonl(v);
  return {reinterpret_cast<const char*>(&n), 4};
}

int process_threads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

std::unique_ptr<ThriftServer> serve(Shared& shared, ThriftServer::Options o) {
  auto server = make_broker_admin_server(std::make_shared<Factory>(shared), std::move(o));
  auto started = server->start();
  EXPECT_TRUE(started.ok()) << started.error().describe();
  EXPECT_NE(server->port(), 0);
  return server;
}

TEST(ThriftServerTest, ManyMoreConnectionsThanThreadsAreServedWithoutAThreadEach) {
  Shared shared;
  auto server = serve(shared, {.threads = 2});
  constexpr int kClients = 64;
  const int threads_before = process_threads();
  ASSERT_GT(threads_before, 0);
  std::vector<Client> clients;
  clients.reserve(kClients);
  for (int i = 0; i < kClients; ++i) clients.push_back(connect_client(server->port()));
  // Every connection accepted and given its processor, all of them idle.
  ASSERT_TRUE(testing::eventually([&] { return shared.made == kClients; })) << shared.made;
  const int threads_after = process_threads();
  EXPECT_LT(threads_after - threads_before, 4)
      << "threads grew from " << threads_before << " to " << threads_after;
  // Each tells its handler something, then every one asks it back.
  for (int i = 0; i < kClients; ++i) clients[static_cast<std::size_t>(i)].rpc->authenticate("", 1000 + i);
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(ping_connections(clients[static_cast<std::size_t>(i)]), 1000 + i) << "client " << i;
  }
  // All at once, from several threads.
  std::vector<std::thread> callers;
  std::atomic<int> right{0};
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int i = t; i < kClients; i += 8) {
        if (ping_connections(clients[static_cast<std::size_t>(i)]) == 1000 + i) ++right;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(right, kClients);
  EXPECT_EQ(shared.made, kClients);
  EXPECT_TRUE(shared.protocols_given);
  {
    std::lock_guard lock(shared.mu);
    for (const auto& origin : shared.origins) EXPECT_EQ(origin.rfind("127.0.0.1:", 0), 0U) << origin;
  }
  clients.clear();
  EXPECT_TRUE(testing::eventually([&] { return shared.released == kClients; })) << shared.released;
}

TEST(ThriftServerTest, BadFramesCloseOnlyTheirOwnConnection) {
  Shared shared;
  auto server = serve(shared, {.threads = 2});
  auto good = connect_client(server->port());
  good.rpc->authenticate("", 42);
  std::mt19937 rng(11);
  std::string garbage(300, '\0');
  for (auto& ch : garbage) ch = static_cast<char>(rng());
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"a frame of 16 MiB + 1", be32((16U << 20U) + 1) + "abc"},
      {"a negative length", be32(0xfffffff0U)},
      {"a zero length", be32(0)},
      {"a frame of garbage", be32(static_cast<std::uint32_t>(garbage.size())) + garbage},
      {"an unversioned message", be32(10) + std::string("\x00\x00\x00\x05hello\x01", 10)},
  };
  for (const auto& [what, bytes] : attacks) {
    const int fd = raw_connect(server->port());
    ASSERT_GE(fd, 0);
    // Nothing half-closed: the server must close by itself.
    ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    EXPECT_TRUE(server_closes(fd, 5s)) << what;
    ::close(fd);
    EXPECT_EQ(ping_connections(good), 42) << "after " << what;
  }
  // A frame of exactly 16 MiB is still a frame: a ping padded to that
  // length is answered.
  const int fd = raw_connect(server->port());
  ASSERT_GE(fd, 0);
  std::string ping =
      be32(0x80010001U) + be32(4) + "ping" + be32(0) + std::string(1, '\0');  // call, seqid 0, stop
  ping.resize(16U << 20U, '\0');
  const std::string big = be32(16U << 20U) + ping;
  std::thread writer([&] { (void)::send(fd, big.data(), big.size(), MSG_NOSIGNAL); });
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::array<unsigned char, 8> head{};
  EXPECT_EQ(::recv(fd, head.data(), head.size(), MSG_WAITALL), 8);
  writer.join();
  ::close(fd);
  EXPECT_GT(head[3] + head[2] * 256, 8) << "reply length";
  EXPECT_EQ(head[4], 0x80);  // strict binary, version 1
  EXPECT_EQ(head[7], 2);     // T_REPLY
  EXPECT_EQ(ping_connections(good), 42);
  auto fresh = connect_client(server->port());
  EXPECT_EQ(ping_connections(fresh), -1);
}

TEST(ThriftServerTest, IdleConnectionsAreClosedBusyOnesAreNot) {
  Shared shared;
  auto server = serve(shared, {.idle_timeout = 300ms, .threads = 1});
  const auto t0 = std::chrono::steady_clock::now();
  const int idle = raw_connect(server->port());
  ASSERT_GE(idle, 0);
  auto busy = connect_client(server->port());
  busy.rpc->authenticate("", 9);
  // Calls every 100 ms, for longer than the timeout: the same connection
  // answers every time (a closed one would fail, it does not reconnect).
  for (int i = 0; i < 8; ++i) {
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(ping_connections(busy), 9) << i;
  }
  EXPECT_TRUE(server_closes(idle, 5s));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 290ms);
  ::close(idle);
  // Half a frame, then silence: closed too.
  const int stalled = raw_connect(server->port());
  ASSERT_GE(stalled, 0);
  const std::string half = be32(100) + "abc";
  ASSERT_EQ(::send(stalled, half.data(), half.size(), MSG_NOSIGNAL), static_cast<ssize_t>(half.size()));
  EXPECT_TRUE(server_closes(stalled, 5s));
  ::close(stalled);
  std::this_thread::sleep_for(400ms);  // busy idles now too
  EXPECT_THROW(ping_connections(busy), apache::thrift::TException);
  EXPECT_EQ(shared.made, 3);
  EXPECT_TRUE(testing::eventually([&] { return shared.released == 3; })) << shared.released;
}

TEST(ThriftServerTest, EachConnectionHasItsOwnProcessor) {
  Shared shared;
  auto server = serve(shared, {.threads = 4});
  auto a = connect_client(server->port());
  auto b = connect_client(server->port());
  a.rpc->authenticate("", 7);
  EXPECT_EQ(ping_connections(a), 7);
  EXPECT_EQ(ping_connections(b), -1) << "b sees a's state";
  b.rpc->authenticate("", 8);
  EXPECT_EQ(ping_connections(a), 7);
  EXPECT_EQ(ping_connections(b), 8);
  EXPECT_EQ(shared.made, 2);
  // A single processor for all, with the other constructor: shared state.
  auto handler = std::make_shared<ConnectionHandler>(shared, 99);
  ThriftServer single(std::make_shared<idl::BrokerAdminProcessor>(handler), {});
  ASSERT_TRUE(single.start().ok());
  auto c = connect_client(single.port());
  auto d = connect_client(single.port());
  c.rpc->authenticate("", 5);
  EXPECT_EQ(ping_connections(d), 5);
}

TEST(ThriftServerTest, AtMaxConnectionsFurtherClientsWaitUntilOneCloses) {
  Shared shared;
  auto server = serve(shared, {.max_connections = 2, .threads = 2});
  auto first = std::make_unique<Client>(connect_client(server->port()));
  auto second = connect_client(server->port());
  EXPECT_EQ(ping_connections(*first), -1);
  EXPECT_EQ(ping_connections(second), -1);
  auto third = connect_client(server->port());  // in the listen backlog
  auto answer = std::async(std::launch::async, [&] {
    third.rpc->authenticate("", 3);
    return ping_connections(third);
  });
  EXPECT_EQ(answer.wait_for(300ms), std::future_status::timeout);
  EXPECT_EQ(shared.made, 2);
  first.reset();
  ASSERT_EQ(answer.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(answer.get(), 3);
  EXPECT_EQ(shared.made, 3);
}

TEST(ThriftServerTest, StopWaitsForABlockedHandlerThenClosesEverything) {
  Shared shared;
  auto server = serve(shared, {.threads = 2});
  auto idle = raw_connect(server->port());
  ASSERT_GE(idle, 0);
  auto caller = connect_client(server->port());
  auto call = std::async(std::launch::async, [&] {
    try {
      caller.rpc->fence("block", 0, 1);
      return true;
    } catch (const apache::thrift::TException&) {
      return false;  // closed before the reply went out: also fine
    }
  });
  ASSERT_TRUE(testing::eventually([&] { return shared.blocked == 1; }));
  const auto stopped = std::async(std::launch::async, [&] { server->stop(); });
  EXPECT_EQ(stopped.wait_for(300ms), std::future_status::timeout)
      << "stop() returned under a running handler";
  shared.open_gate();
  ASSERT_EQ(stopped.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(server_closes(idle, 2s));
  ::close(idle);
  ASSERT_EQ(call.wait_for(5s), std::future_status::ready);
  (void)call.get();
  EXPECT_EQ(shared.made, 2);
  EXPECT_EQ(shared.released, 2);  // every processor gone once stop() returned
  server->stop();                 // idempotent
  EXPECT_LT(raw_connect(server->port()), 0) << "still listening";
}

TEST(ThriftServerTest, StartRefusesBadOptionsAndABusyPort) {
  Shared shared;
  for (int threads : {0, 1025}) {
    auto s = make_broker_admin_server(std::make_shared<Factory>(shared), {.threads = threads});
    EXPECT_EQ(s->start().code(), idl::ErrorCode::INVALID_ARGUMENT) << threads;
  }
  auto first = serve(shared, {});
  auto second = make_broker_admin_server(std::make_shared<Factory>(shared), {.port = first->port()});
  const auto r = second->start();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), idl::ErrorCode::UNAVAILABLE);
  EXPECT_EQ(first->start().code(), idl::ErrorCode::INTERNAL) << "started twice";
}

}  // namespace
}  // namespace catena::control
