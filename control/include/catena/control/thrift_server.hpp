// A Thrift service on a TCP port, configured the way every Catena control
// endpoint must be: TFramedTransport (frames capped at 16 MiB) with the
// strict binary protocol (bounded strings and containers), one thread per
// connection, idle connections closed after idle_timeout. Malformed input
// only costs its own connection.
//
// The accept loop and the connection threads are ours, not Thrift's
// TThreadedServer: there, the accept loop shares each connection's
// transport and protocol with the connection's thread through shared_ptrs
// released inside libthrift, and frees them when it holds the last one; a
// sanitizer cannot see that release, so every such free looked like a data
// race. Here a connection's transport and protocol are made by the accept
// loop, handed over whole, and used and freed by its thread alone.
//
// The controller serves Controller with it (controller_server.hpp); brokers
// serve BrokerAdmin with make_broker_admin_server() so both ends agree on
// the wire format.
//
// Lifecycle: construct, start() (binds synchronously: a busy port is an
// error from start(), and port() is known when it returns), stop()
// (idempotent; the destructor calls it). Handlers must be thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/result.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace apache::thrift {
class TProcessor;
class TProcessorFactory;
namespace transport {
class TServerSocket;
class TTransport;
}  // namespace transport
}  // namespace apache::thrift

namespace catena::control {

class ThriftServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;  // 0: any free port, see port()
    std::chrono::milliseconds idle_timeout{60000};
    std::int64_t max_connections = 1024;  // further clients wait in the accept backlog
  };

  ThriftServer(std::shared_ptr<apache::thrift::TProcessor> processor, Options options);
  // One processor per connection, from the factory (a handler that keeps
  // per-connection state, such as the Controller's authenticated identity).
  ThriftServer(std::shared_ptr<apache::thrift::TProcessorFactory> factory, Options options);
  ~ThriftServer();
  ThriftServer(const ThriftServer&) = delete;
  ThriftServer& operator=(const ThriftServer&) = delete;

  [[nodiscard]] Result<void> start();
  [[nodiscard]] std::uint16_t port() const noexcept { return bound_port_; }
  [[nodiscard]] std::string address() const;  // host:port once started
  void stop();

 private:
  // One client's thread; `done` once it returned (its thread may be joined).
  struct Connection {
    std::thread thread;
    bool done = false;
  };

  void accept_loop();
  void serve_connection(std::shared_ptr<apache::thrift::transport::TTransport> client);
  // Joins the threads of connections that ended. Called with mu_ held.
  void reap_locked() REQUIRES(mu_);

  std::shared_ptr<apache::thrift::TProcessorFactory> factory_;
  Options options_;
  std::shared_ptr<apache::thrift::transport::TServerSocket> socket_;
  std::uint16_t bound_port_ = 0;
  std::thread accept_thread_;
  Mutex mu_;
  std::condition_variable changed_;  // a connection ended, or stop()
  bool started_ GUARDED_BY(mu_) = false;
  bool stopped_ GUARDED_BY(mu_) = false;
  std::list<Connection> connections_ GUARDED_BY(mu_);
  std::int64_t active_ GUARDED_BY(mu_) = 0;
};

// A BrokerAdmin endpoint for a broker daemon (or a test double).
[[nodiscard]] std::unique_ptr<ThriftServer> make_broker_admin_server(
    std::shared_ptr<idl::BrokerAdminIf> handler, ThriftServer::Options options);
// The same with a handler per connection (one that remembers who it is).
[[nodiscard]] std::unique_ptr<ThriftServer> make_broker_admin_server(
    std::shared_ptr<idl::BrokerAdminIfFactory> handlers, ThriftServer::Options options);

// Routes the Thrift library's own diagnostics (connection errors and the
// like) to spdlog at debug level. Call once at startup.
void route_thrift_logs_to_spdlog();

}  // namespace catena::control
