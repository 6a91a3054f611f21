#include <fmt/format.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <thrift/TOutput.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>

#include <catena/control/address.hpp>
#include <catena/control/thrift_server.hpp>

#include "thrift_socket.hpp"

namespace catena::control {
namespace {

using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::server::TThreadedServer;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TTransport;
using apache::thrift::transport::TTransportFactory;

// Binds when start() asks, so bind errors and the chosen port are known
// before serve() runs; serve()'s own listen() call is then a no-op.
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

void thrift_output(const char* message) {
  spdlog::debug("thrift: {}", message);
}

}  // namespace

void route_thrift_logs_to_spdlog() {
  apache::thrift::GlobalOutput.setOutputFunction(&thrift_output);
}

ThriftServer::ThriftServer(std::shared_ptr<apache::thrift::TProcessor> processor, Options options)
    : ThriftServer(std::make_shared<apache::thrift::TSingletonProcessorFactory>(std::move(processor)),
                   std::move(options)) {}

ThriftServer::ThriftServer(std::shared_ptr<apache::thrift::TProcessorFactory> factory, Options options)
    : factory_(std::move(factory)), options_(std::move(options)) {}

ThriftServer::~ThriftServer() {
  stop();
}

std::string ThriftServer::address() const {
  return HostPort{options_.host, bound_port_}.to_string();
}

Result<void> ThriftServer::start() {
  auto socket = std::make_shared<PreboundServerSocket>(options_.host, options_.port);
  const int idle_ms = static_cast<int>(options_.idle_timeout.count());
  socket->setRecvTimeout(idle_ms);
  socket->setSendTimeout(idle_ms);
  try {
    socket->listen();
  } catch (const std::exception& e) {
    return make_error(idl::ErrorCode::UNAVAILABLE,
                      fmt::format("cannot listen on {}:{}: {}", options_.host, options_.port, e.what()));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(socket->getSocketFD(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return make_error(idl::ErrorCode::INTERNAL, "getsockname failed on the listening socket");
  }
  bound_port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);

  auto protocol =
      std::make_shared<TBinaryProtocolFactory>(detail::kMaxStringBytes, detail::kMaxContainerItems,
                                               /*strict_read=*/true, /*strict_write=*/true);
  server_ = std::make_shared<TThreadedServer>(factory_, socket, std::make_shared<FramedTransportFactory>(),
                                              protocol);
  server_->setConcurrentClientLimit(options_.max_connections);
  serve_thread_ = std::thread([server = server_] {
    try {
      server->serve();
    } catch (const std::exception& e) {
      spdlog::error("thrift server stopped: {}", e.what());
    }
  });
  return {};
}

void ThriftServer::stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (server_) server_->stop();
  if (serve_thread_.joinable()) serve_thread_.join();
}

std::unique_ptr<ThriftServer> make_broker_admin_server(std::shared_ptr<idl::BrokerAdminIf> handler,
                                                       ThriftServer::Options options) {
  return std::make_unique<ThriftServer>(std::make_shared<idl::BrokerAdminProcessor>(std::move(handler)),
                                        std::move(options));
}

}  // namespace catena::control
