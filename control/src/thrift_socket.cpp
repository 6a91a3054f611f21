#include "thrift_socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <fmt/format.h>
#include <string>
#include <sys/socket.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>
#include <thrift/transport/TTransportException.h>

#include "checked_protocol.hpp"

namespace catena::control::detail {

using apache::thrift::TConfiguration;
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
      std::make_shared<CheckedBinaryProtocol>(c.transport, kMaxStringBytes, kMaxContainerItems, true, true);
  try {
    c.transport->open();
  } catch (const std::exception& e) {
    return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("connect {}: {}", peer.to_string(), e.what()));
  }
  return c;
}

bool refuses_connections(const HostPort& peer, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(peer.port);
  if (::getaddrinfo(peer.host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) return false;
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int error = 0;
  if (fd >= 0) {
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        pollfd pfd{};
        pfd.fd = fd;
        pfd.events = POLLOUT;
        error = 0;
        if (::poll(&pfd, 1, static_cast<int>(timeout.count())) == 1) {
          socklen_t len = sizeof(error);
          if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = 0;
        }
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return error == ECONNREFUSED;
}

}  // namespace catena::control::detail
