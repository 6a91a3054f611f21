#include "soft/net.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <catena/fabric/host_port.hpp>

namespace catena::fabric::soft {
namespace {

Error sys_error(Errc code, const std::string& what) {
  return make_error(code, what + ": " + std::strerror(errno));
}

int millis_until(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Waits for `events` on fd; false on timeout.
Result<bool> wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, millis_until(deadline));
    if (n > 0) {
      return true;
    }
    if (n == 0) {
      return false;
    }
    if (errno != EINTR) {
      return sys_error(Errc::io_error, "poll");
    }
  }
}

}  // namespace

void UniqueFd::reset(int fd) noexcept {
  if (fd_ >= 0) {
    close(fd_);
  }
  fd_ = fd;
}

Result<SocketAddress> parse_address(std::string_view address) {
  auto bad = [&](const char* why) {
    return make_error(Errc::invalid_argument,
                      "bad address '" + std::string(address) + "' (" + why + "; expected ip:port)");
  };
  std::string why;
  const auto hp = split_host_port(address, &why, PortRule::zero_allowed);
  if (!hp) return bad(why.c_str());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string& host_s = hp->host;
  const std::string port_s = std::to_string(hp->port);
  int rc = getaddrinfo(host_s.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return make_error(Errc::invalid_argument,
                      "cannot resolve '" + std::string(address) + "': " + gai_strerror(rc));
  }
  SocketAddress out;
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  out.length = res->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

std::string format_address(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  if (sa->sa_family == AF_INET6) {
    return std::string("[") + host + "]:" + serv;
  }
  return std::string(host) + ":" + serv;
}

std::string peer_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return "?";
  }
  return format_address(reinterpret_cast<sockaddr*>(&ss), len);
}

std::string local_name(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return "?";
  }
  return format_address(reinterpret_cast<sockaddr*>(&ss), len);
}

Result<UniqueFd> listen_on(const SocketAddress& addr) {
  UniqueFd fd(socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    return sys_error(Errc::io_error, "socket");
  }
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0) {
    return sys_error(errno == EADDRNOTAVAIL ? Errc::invalid_argument : Errc::io_error,
                     "bind " + format_address(reinterpret_cast<const sockaddr*>(&addr.storage), addr.length));
  }
  if (listen(fd.get(), 128) != 0) {
    return sys_error(Errc::io_error, "listen");
  }
  return fd;
}

Result<void> configure_stream(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return sys_error(Errc::io_error, "fcntl");
  }
  int one = 1;
  // Every frame is a complete message the peer is waiting for: never let
  // Nagle hold one back.
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    return sys_error(Errc::io_error, "setsockopt(TCP_NODELAY)");
  }
  return {};
}

Result<UniqueFd> connect_to(const SocketAddress& addr, Clock::time_point deadline) {
  const std::string name = format_address(reinterpret_cast<const sockaddr*>(&addr.storage), addr.length);
  UniqueFd fd(socket(addr.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) {
    return sys_error(Errc::io_error, "socket");
  }
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.length) != 0) {
    if (errno == ECONNREFUSED) {
      return sys_error(Errc::refused, "connect " + name);
    }
    if (errno != EINPROGRESS) {
      return sys_error(Errc::io_error, "connect " + name);
    }
    auto ready = wait_fd(fd.get(), POLLOUT, deadline);
    if (!ready) {
      return ready.error();
    }
    if (!ready.value()) {
      return make_error(Errc::timeout, "connect " + name + ": timed out");
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      errno = err;
      return sys_error(err == ECONNREFUSED ? Errc::refused : Errc::io_error, "connect " + name);
    }
  }
  if (auto r = configure_stream(fd.get()); !r) {
    return r.error();
  }
  return fd;
}

Result<void> write_exact(int fd, const void* buf, std::size_t len, Clock::time_point deadline) {
  const auto* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto ready = wait_fd(fd, POLLOUT, deadline);
      if (!ready) {
        return ready.error();
      }
      if (!ready.value()) {
        return make_error(Errc::timeout, "handshake write timed out");
      }
      continue;
    }
    return sys_error(Errc::disconnected, "handshake write");
  }
  return {};
}

Result<void> read_exact(int fd, void* buf, std::size_t len, Clock::time_point deadline) {
  auto* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) {
      return make_error(Errc::disconnected, "peer closed the connection during the handshake");
    }
    if (errno == EINTR) {
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      auto ready = wait_fd(fd, POLLIN, deadline);
      if (!ready) {
        return ready.error();
      }
      if (!ready.value()) {
        return make_error(Errc::timeout, "handshake read timed out");
      }
      continue;
    }
    return sys_error(Errc::disconnected, "handshake read");
  }
  return {};
}

std::string host_identity() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (id.empty()) {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    id = name;
  }
  return id;
}

}  // namespace catena::fabric::soft
