// A Thrift service on a TCP port, configured the way every Catena control
// endpoint must be: the TFramedTransport wire format (a big-endian int32
// length, then the payload; a length <= 0 or above 16 MiB closes the
// connection) with the strict binary protocol (bounded strings and
// containers), idle connections closed after idle_timeout. Malformed input
// (a bad length, a garbage payload, a protocol error) only costs its own
// connection, logged at debug.
//
// Event-driven, on Boost.Asio: one io_context run by Options::threads
// threads (16 by default), an asynchronous accept, and per connection
// asynchronous reads of the length, then of the frame. Once a whole frame
// is in, the connection's processor runs on it (over a TMemoryBuffer), the
// framed reply is written, and only then is the next frame read: one
// request at a time per connection, as Thrift's request/response contract
// has it (a oneway call, which has no reply, just goes on reading). An idle
// connection costs a socket and a timer, no thread, so the number of
// connections is bounded by max_connections, not by threads.
//
// Handlers may block (the controller's take its lock and may wait on
// ZooKeeper): a blocked handler holds one of the threads, which is why
// there are 16 by default. While all of them are inside handlers, other
// connections' complete requests wait for one to return (the controller's
// handlers keep 4 for brokers' heartbeats: ControllerServer answers other
// calls past the rest UNAVAILABLE).
//
// Nothing of a connection is shared between threads at once: its socket,
// idle timer, transports, protocols and processor belong to the
// connection, whose handlers run on its own strand, one at a time, each
// handing over to the next through Asio's queue (so ThreadSanitizer sees
// the order). We own every transport and protocol; libthrift never holds
// one of them across threads. (Thrift's TThreadedServer is not used for
// that reason: its accept loop freed a connection's transport after
// refcount releases inside uninstrumented libthrift, which looked like
// races under TSan. Its thread per connection also did not scale.)
//
// The controller serves Controller with it (controller_server.hpp); brokers
// serve BrokerAdmin with make_broker_admin_server() so both ends agree on
// the wire format.
//
// Lifecycle: construct, start() (binds synchronously: a busy port is an
// error from start(), and port() is known when it returns; options out of
// range are INVALID_ARGUMENT), stop() (idempotent; the destructor calls it:
// closes the listening socket and every connection, then joins the
// threads, so it returns once every handler that was running returned; do
// not call it from a handler). Handlers must be thread-safe: calls of
// different connections run at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <catena/control/idl/BrokerAdmin.h>
#include <catena/control/result.hpp>

namespace apache::thrift {
class TProcessor;
class TProcessorFactory;
}  // namespace apache::thrift

namespace catena::control {

class ThriftServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    std::uint16_t port = 0;  // 0: any free port, see port()
    // A connection that sent nothing while the server waited for a request
    // (or took none of a reply it was being sent) for this long is closed.
    // Time inside a handler does not count.
    std::chrono::milliseconds idle_timeout{60000};
    // Connections open at once, >= 1. At the limit the server stops
    // accepting: further clients wait in the listen backlog (their connect
    // succeeds, their calls wait) until a connection closes.
    std::int64_t max_connections = 1024;
    // Threads that run handlers and the I/O, 1..1024. Not a connection
    // limit: it bounds how many calls run (and may block) at once.
    int threads = 16;
    // Told of every call answered: the method and whether the reply is an
    // error (a declared exception or a TApplicationException). Runs on the
    // connection's thread after the handler; empty: nothing is told.
    std::function<void(std::string_view method, bool failed)> on_reply = {};
  };

  ThriftServer(std::shared_ptr<apache::thrift::TProcessor> processor, Options options);
  // One processor per connection, from the factory (a handler that keeps
  // per-connection state, such as the Controller's authenticated identity).
  // The factory's TConnectionInfo has the connection's own input and output
  // protocols (alive as long as the connection) and, as its transport, one
  // that only answers getOrigin(): the peer as numbers ("10.0.0.7:51234").
  ThriftServer(std::shared_ptr<apache::thrift::TProcessorFactory> factory, Options options);
  ~ThriftServer();
  ThriftServer(const ThriftServer&) = delete;
  ThriftServer& operator=(const ThriftServer&) = delete;

  [[nodiscard]] Result<void> start();
  [[nodiscard]] std::uint16_t port() const noexcept { return bound_port_; }
  [[nodiscard]] std::string address() const;  // host:port once started
  void stop();

 private:
  struct Impl;  // the io_context, the acceptor, the connections (thrift_server.cpp)

  Options options_;
  std::unique_ptr<Impl> impl_;
  std::uint16_t bound_port_ = 0;
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
