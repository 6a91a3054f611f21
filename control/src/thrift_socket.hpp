// Client-side Thrift connections as the control plane uses them: TCP with a
// connect timeout, framed transport, strict binary protocol.
#pragma once

#include <chrono>
#include <memory>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TProtocol.h>
#include <thrift/transport/TSocket.h>

#include <catena/control/address.hpp>
#include <catena/control/result.hpp>

namespace catena::control::detail {

// Frames above this are refused on both ends; metadata replies are far smaller.
inline constexpr int kMaxFrameBytes = 16 << 20;
inline constexpr int kMaxStringBytes = 8 << 20;
inline constexpr int kMaxContainerItems = 1 << 20;

[[nodiscard]] std::shared_ptr<apache::thrift::TConfiguration> wire_config();

struct ThriftConnection {
  std::shared_ptr<apache::thrift::transport::TSocket> socket;
  std::shared_ptr<apache::thrift::transport::TTransport> transport;  // framed, over socket
  std::shared_ptr<apache::thrift::protocol::TProtocol> protocol;

  [[nodiscard]] bool is_open() const { return transport && transport->isOpen(); }
  void close() noexcept;
  void set_timeout(std::chrono::milliseconds timeout);
  // An idle RPC connection never has anything to read: if it is readable the
  // peer closed it (idle timeout, restart) or sent junk. Reconnect first.
  [[nodiscard]] bool stale() const;
};

// UNAVAILABLE if the peer cannot be reached within connect_timeout.
[[nodiscard]] Result<ThriftConnection> open_connection(const HostPort& peer,
                                                       std::chrono::milliseconds connect_timeout,
                                                       std::chrono::milliseconds rpc_timeout);

// True only when connecting to peer is refused (ECONNREFUSED: nothing
// listens at that address, on a live host). False when it connects, times
// out, or fails in any other way. One connect, closed at once; bounded by
// timeout.
[[nodiscard]] bool refuses_connections(const HostPort& peer, std::chrono::milliseconds timeout);

}  // namespace catena::control::detail
