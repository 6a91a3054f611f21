#include "thrift_socket.hpp"

#include <poll.h>

#include <fmt/format.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TTransportException.h>

namespace catena::control::detail {

using apache::thrift::TConfiguration;
using apache::thrift::protocol::TBinaryProtocol;
using apache::thrift::transport::TFramedTransport;
using apache::thrift::transport::TSocket;

std::shared_ptr<TConfiguration> wire_config() {
  return std::make_shared<TConfiguration>(kMaxFrameBytes, kMaxFrameBytes);
}

void ThriftConnection::close() noexcept {
  try {
    if (transport) transport->close();
  } catch (...) {  // closing a broken socket may throw; it is closed either way
  }
  transport.reset();
  protocol.reset();
  socket.reset();
}

void ThriftConnection::set_timeout(std::chrono::milliseconds timeout) {
  socket->setRecvTimeout(static_cast<int>(timeout.count()));
  socket->setSendTimeout(static_cast<int>(timeout.count()));
}

bool ThriftConnection::stale() const {
  if (!socket || !socket->isOpen()) return true;
  pollfd pfd{};
  pfd.fd = socket->getSocketFD();
  pfd.events = POLLIN;
  return ::poll(&pfd, 1, 0) != 0;
}

Result<ThriftConnection> open_connection(const HostPort& peer, std::chrono::milliseconds connect_timeout,
                                         std::chrono::milliseconds rpc_timeout) {
  ThriftConnection c;
  c.socket = std::make_shared<TSocket>(peer.host, peer.port, wire_config());
  c.socket->setConnTimeout(static_cast<int>(connect_timeout.count()));
  c.socket->setNoDelay(true);
  c.set_timeout(rpc_timeout);
  c.transport = std::make_shared<TFramedTransport>(c.socket, wire_config());
  c.protocol =
      std::make_shared<TBinaryProtocol>(c.transport, kMaxStringBytes, kMaxContainerItems, true, true);
  try {
    c.transport->open();
  } catch (const std::exception& e) {
    return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("connect {}: {}", peer.to_string(), e.what()));
  }
  return c;
}

}  // namespace catena::control::detail
