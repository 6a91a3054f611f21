#include <fmt/format.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <thrift/TOutput.h>
#include <thrift/TProcessor.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TServerSocket.h>
#include <thrift/transport/TTransportException.h>

#include <catena/control/address.hpp>
#include <catena/control/thrift_server.hpp>

#include "thrift_socket.hpp"

namespace catena::control {
namespace {

using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TServerSocket;
using apache::thrift::transport::TTransport;
using apache::thrift::transport::TTransportException;
using namespace std::chrono_literals;

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
  {
    MutexLock lock(mu_);
    if (started_ || stopped_) return make_error(idl::ErrorCode::INTERNAL, "a ThriftServer starts once");
    started_ = true;
  }
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
  socket_ = std::move(socket);
  accept_thread_ = std::thread([this] { accept_loop(); });
  return {};
}

void ThriftServer::accept_loop() {
  for (;;) {
    {
      UniqueLock lock(mu_);
      reap_locked();
      // At the limit, further clients wait in the listen backlog.
      lock.wait(changed_, [this] {
        mu_.assert_held();  // the wait holds it when it asks
        return stopped_ || active_ < options_.max_connections;
      });
      if (stopped_) return;
    }
    std::shared_ptr<TTransport> client;
    try {
      client = socket_->accept();
    } catch (const TTransportException& e) {
      if (e.getType() == TTransportException::INTERRUPTED) return;  // stop()
      // Out of descriptors, a client that reset before accept: keep serving.
      spdlog::debug("thrift server: accept failed: {}", e.what());
      std::this_thread::sleep_for(10ms);
      continue;
    }
    MutexLock lock(mu_);
    if (stopped_) {
      client->close();
      return;
    }
    ++active_;
    auto at = connections_.emplace(connections_.end());
    at->thread = std::thread([this, connection = &*at, client = std::move(client)]() mutable {
      serve_connection(std::move(client));
      {
        MutexLock done_lock(mu_);
        connection->done = true;
        --active_;
      }
      changed_.notify_all();
    });
  }
}

void ThriftServer::serve_connection(std::shared_ptr<TTransport> client) {
  // Made here and freed here: this thread is their only user.
  auto transport = std::make_shared<TFramedTransport>(client, detail::wire_config());
  auto protocol =
      std::make_shared<TBinaryProtocol>(transport, detail::kMaxStringBytes, detail::kMaxContainerItems,
                                        /*strict_read=*/true, /*strict_write=*/true);
  std::shared_ptr<apache::thrift::TProcessor> processor;
  try {
    processor = factory_->getProcessor(apache::thrift::TConnectionInfo{protocol, protocol, client});
  } catch (const std::exception& e) {
    spdlog::warn("thrift server: no processor for a connection: {}", e.what());
  }
  for (; processor;) {
    try {
      if (!processor->process(protocol, protocol, nullptr)) break;
    } catch (const TTransportException& e) {
      // A client that hung up, was idle past idle_timeout, or stop(): done,
      // quietly. Anything else (a frame over the limit, garbage): logged.
      const auto type = e.getType();
      if (type != TTransportException::END_OF_FILE && type != TTransportException::INTERRUPTED &&
          type != TTransportException::TIMED_OUT) {
        spdlog::debug("thrift server: connection dropped: {}", e.what());
      }
      break;
    } catch (const std::exception& e) {
      spdlog::debug("thrift server: connection dropped: {}", e.what());
      break;
    }
  }
  try {
    transport->close();
  } catch (const std::exception&) {
    // Closing a socket the peer already reset: nothing left to do.
  }
}

void ThriftServer::reap_locked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!it->done) {
      ++it;
      continue;
    }
    // It has set `done` and only returns from here: a short wait at most.
    it->thread.join();
    it = connections_.erase(it);
  }
}

void ThriftServer::stop() {
  {
    MutexLock lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  changed_.notify_all();
  if (socket_) {
    // Wakes accept() and every connection blocked reading a request; one
    // inside a call finishes it first.
    socket_->interrupt();
    socket_->interruptChildren();
  }
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<Connection> left;
  {
    MutexLock lock(mu_);
    left.swap(connections_);  // the nodes (and each thread's `connection`) stay put
  }
  for (auto& c : left) c.thread.join();
  if (socket_) socket_->close();
}

std::unique_ptr<ThriftServer> make_broker_admin_server(std::shared_ptr<idl::BrokerAdminIf> handler,
                                                       ThriftServer::Options options) {
  return std::make_unique<ThriftServer>(std::make_shared<idl::BrokerAdminProcessor>(std::move(handler)),
                                        std::move(options));
}

std::unique_ptr<ThriftServer> make_broker_admin_server(std::shared_ptr<idl::BrokerAdminIfFactory> handlers,
                                                       ThriftServer::Options options) {
  return std::make_unique<ThriftServer>(
      std::make_shared<idl::BrokerAdminProcessorFactory>(std::move(handlers)), std::move(options));
}

}  // namespace catena::control
