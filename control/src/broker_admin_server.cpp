#include <catena/control/broker_admin_server.hpp>
#include <catena/control/idl/BrokerAdmin.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <map>
#include <mutex>

#include "thrift_socket.hpp"

namespace catena::control {

using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TTransport;
using apache::thrift::transport::TTransportFactory;

bool replica_config_for(const std::string& node_id, const idl::ChainAssignment& a, chain::ReplicaConfig* out) {
  const auto& reps = a.route.replicas;
  std::size_t pos = reps.size();
  for (std::size_t i = 0; i < reps.size(); ++i) {
    if (reps[i].node_id == node_id) pos = i;
  }
  if (pos == reps.size()) return false;
  chain::ReplicaConfig rc;
  rc.channel = a.route.channel;
  rc.partition = static_cast<std::uint32_t>(a.route.partition);
  rc.epoch = static_cast<std::uint64_t>(a.route.epoch);
  rc.node_id = node_id;
  rc.position = static_cast<std::uint32_t>(pos);
  rc.chain_length = static_cast<std::uint32_t>(reps.size());
  if (pos > 0) rc.predecessor_node = reps[pos - 1].node_id;
  if (pos + 1 < reps.size()) {
    rc.successor_node = reps[pos + 1].node_id;
    rc.successor_addr = reps[pos + 1].fabric_addr;
  }
  rc.head_addr = reps.front().fabric_addr;
  rc.log.segment_bytes = static_cast<std::uint32_t>(a.segment_bytes);
  rc.log.ttl_ns = static_cast<std::uint64_t>(a.ttl_ms) * 1'000'000ull;
  rc.start_offset = static_cast<std::uint64_t>(a.route.start_offset);
  *out = rc;
  return true;
}

class BrokerAdminServer::Handler final : public idl::BrokerAdminIf {
 public:
  explicit Handler(broker::Broker& b) : broker_(b) {}

  void configureChain(const idl::ChainAssignment& a) override {
    const std::string node = broker_.node_id();
    if (a.segment_bytes <= 0 || a.segment_bytes > (1ll << 30) || a.ttl_ms <= 0 || a.route.partition < 0 ||
        a.route.epoch <= 0) {
      throw make_error(idl::ErrorCode::INVALID_ARGUMENT, "malformed chain assignment").to_thrift();
    }
    const auto key = std::make_pair(a.route.channel, a.route.partition);
    chain::ReplicaConfig rc;
    if (!replica_config_for(node, a, &rc)) {
      auto r = broker_.fence(a.route.channel, static_cast<std::uint32_t>(a.route.partition),
                             static_cast<std::uint64_t>(a.route.epoch));
      if (r.status == broker::ConfigureStatus::stale_epoch) throw stale(key, r.message);
      std::lock_guard lk(mu_);
      installed_.erase(key);
      return;
    }
    auto r = broker_.configure(rc);
    switch (r.status) {
      case broker::ConfigureStatus::applied: {
        std::lock_guard lk(mu_);
        installed_[key] = a.route;
        return;
      }
      case broker::ConfigureStatus::stale_epoch: throw stale(key, r.message);
      case broker::ConfigureStatus::invalid:
        throw make_error(idl::ErrorCode::INVALID_ARGUMENT, r.message).to_thrift();
      case broker::ConfigureStatus::failed: throw make_error(idl::ErrorCode::INTERNAL, r.message).to_thrift();
    }
  }

  void fence(const std::string& channel, std::int32_t partition, std::int64_t epoch) override {
    if (partition < 0 || epoch < 0) throw make_error(idl::ErrorCode::INVALID_ARGUMENT, "bad fence").to_thrift();
    auto r = broker_.fence(channel, static_cast<std::uint32_t>(partition), static_cast<std::uint64_t>(epoch));
    if (r.status == broker::ConfigureStatus::stale_epoch) throw stale({channel, partition}, r.message);
    std::lock_guard lk(mu_);
    installed_.erase({channel, partition});
  }

  void ping(idl::NodeStats& out) override {
    auto st = broker_.stats();
    out.segments = static_cast<std::int64_t>(st.segments);
    out.bytes = static_cast<std::int64_t>(st.bytes);
    out.connections = static_cast<std::int64_t>(st.connections);
  }

 private:
  idl::CatenaError stale(const std::pair<std::string, std::int32_t>& key, const std::string& msg) {
    ControlError e = make_error(idl::ErrorCode::STALE_EPOCH, msg);
    std::lock_guard lk(mu_);
    auto it = installed_.find(key);
    if (it != installed_.end()) e.current_route = it->second;
    return e.to_thrift();
  }

  broker::Broker& broker_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::int32_t>, idl::PartitionRoute> installed_;
};

namespace {

// Binds in start() so the chosen port is known before serve() runs.
class PreboundServerSocket final : public TServerSocket {
 public:
  using TServerSocket::TServerSocket;
  void listen() override {
    if (!listening_) {
      TServerSocket::listen();
      listening_ = true;
    }
  }
  void close() override {
    TServerSocket::close();
    listening_ = false;
  }

 private:
  bool listening_ = false;
};

class FramedTransportFactory final : public TTransportFactory {
 public:
  std::shared_ptr<TTransport> getTransport(std::shared_ptr<TTransport> trans) override {
    return std::make_shared<apache::thrift::transport::TFramedTransport>(trans, detail::wire_config());
  }
};

}  // namespace

BrokerAdminServer::BrokerAdminServer(broker::Broker& broker, Options options)
    : broker_(broker), options_(std::move(options)) {}

BrokerAdminServer::~BrokerAdminServer() { stop(); }

Result<void> BrokerAdminServer::start() {
  auto socket = std::make_shared<PreboundServerSocket>(options_.host, options_.port);
  socket->setRecvTimeout(60000);
  socket->setSendTimeout(60000);
  try {
    socket->listen();
  } catch (const std::exception& e) {
    return make_error(idl::ErrorCode::UNAVAILABLE,
                      fmt::format("cannot listen on {}:{}: {}", options_.host, options_.port, e.what()));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(socket->getSocketFD(), reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    bound_port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  }
  handler_ = std::make_shared<Handler>(broker_);
  auto protocol = std::make_shared<TBinaryProtocolFactory>(detail::kMaxStringBytes, detail::kMaxContainerItems,
                                                           true, true);
  server_ = std::make_shared<TThreadedServer>(std::make_shared<idl::BrokerAdminProcessor>(handler_), socket,
                                              std::make_shared<FramedTransportFactory>(), protocol);
  serve_thread_ = std::thread([server = server_] {
    try {
      server->serve();
    } catch (const std::exception& e) {
      spdlog::error("broker admin server stopped: {}", e.what());
    }
  });
  return {};
}

void BrokerAdminServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (server_) server_->stop();
  if (serve_thread_.joinable()) serve_thread_.join();
}

}  // namespace catena::control
