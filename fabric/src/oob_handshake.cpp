#include "oob_handshake.hpp"

#include <cerrno>
#include <string>
#include <sys/socket.h>

#include "soft/net.hpp"

namespace catena::fabric::oob {

Hello blank_hello() noexcept {
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kHelloVersion;
  return h;
}

bool valid(const Hello& h) noexcept {
  return h.magic == kHelloMagic && (h.version == kHelloVersion || h.version == kHelloVersionDomain);
}

namespace {

// Writes h as the version its domain calls for.
Result<void> send_hello(int fd, Hello h, Clock::time_point deadline) {
  h.version = h.domain != 0 ? kHelloVersionDomain : kHelloVersion;
  return soft::write_exact(fd, &h, h.domain != 0 ? sizeof h : kHelloV1Bytes, deadline);
}

// Reads a Hello of either version (domain 0 for version 1).
Result<Hello> read_hello(int fd, Clock::time_point deadline) {
  Hello h{};
  if (auto r = soft::read_exact(fd, &h, kHelloV1Bytes, deadline); !r) return r.error();
  if (!valid(h)) return make_error(Errc::io_error, "not a handshake hello");
  if (h.version == kHelloVersionDomain) {
    if (auto r = soft::read_exact(fd, &h.domain, sizeof h.domain, deadline); !r) return r.error();
  } else {
    h.domain = 0;
  }
  return h;
}

}  // namespace

std::uint32_t gid_ipv4(const Hello& h) noexcept {
  return (std::uint32_t{h.gid[12]} << 24) | (std::uint32_t{h.gid[13]} << 16) |
         (std::uint32_t{h.gid[14]} << 8) | h.gid[15];
}

void set_gid_ipv4(Hello& h, std::uint32_t ip) noexcept {
  for (int i = 0; i < 10; ++i) h.gid[i] = 0;
  h.gid[10] = h.gid[11] = 0xff;
  for (int i = 0; i < 4; ++i) h.gid[12 + i] = static_cast<std::uint8_t>(ip >> (24 - 8 * i));
}

Result<Hello> dial(int fd, const Hello& mine, Clock::time_point deadline, std::string_view peer) {
  if (auto r = send_hello(fd, mine, deadline); !r) return r.error();
  auto answer = read_hello(fd, deadline);
  if (!answer) {
    if (answer.code() == Errc::io_error) {
      return make_error(Errc::io_error, "bad handshake reply from " + std::string(peer));
    }
    return make_error(answer.code() == Errc::disconnected ? Errc::refused : answer.code(),
                      "no handshake reply from " + std::string(peer) + ": " + answer.error().message);
  }
  if (answer->refused != 0) {
    return make_error(static_cast<Errc>(answer->errc), std::string(peer) + " refused the connection");
  }
  if (answer->domain != mine.domain) {
    return make_error(Errc::io_error, std::string(peer) + " answered for protection domain " +
                                          std::to_string(answer->domain) + ", not " +
                                          std::to_string(mine.domain));
  }
  return answer;
}

Result<Hello> read_request(int fd, Clock::time_point deadline) {
  auto peer = read_hello(fd, deadline);
  if (!peer) return make_error(Errc::io_error, "bad handshake from a peer");
  return peer;
}

bool dialer_gone(int fd) noexcept {
  // Nothing but the Hello is sent before the answer: a readable byte-less
  // socket is the dialer's end of stream.
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

Result<void> reply(int fd, const Hello& mine, Clock::time_point deadline) {
  return send_hello(fd, mine, deadline);
}

void refuse(int fd, Errc why, Clock::time_point deadline) {
  Hello h = blank_hello();
  h.refused = 1;
  h.errc = static_cast<std::uint8_t>(why);
  (void)send_hello(fd, h, deadline);
}

}  // namespace catena::fabric::oob
