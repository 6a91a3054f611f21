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
  return h.magic == kHelloMagic && h.version == kHelloVersion;
}

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
  if (auto r = soft::write_exact(fd, &mine, sizeof mine, deadline); !r) return r.error();
  Hello answer{};
  if (auto r = soft::read_exact(fd, &answer, sizeof answer, deadline); !r) {
    return make_error(r.code() == Errc::disconnected ? Errc::refused : r.code(),
                      "no handshake reply from " + std::string(peer) + ": " + r.error().message);
  }
  if (!valid(answer)) return make_error(Errc::io_error, "bad handshake reply from " + std::string(peer));
  if (answer.refused != 0) {
    return make_error(static_cast<Errc>(answer.errc), std::string(peer) + " refused the connection");
  }
  return answer;
}

Result<Hello> read_request(int fd, Clock::time_point deadline) {
  Hello peer{};
  if (auto r = soft::read_exact(fd, &peer, sizeof peer, deadline); !r || !valid(peer)) {
    return make_error(Errc::io_error, "bad handshake from a peer");
  }
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
  return soft::write_exact(fd, &mine, sizeof mine, deadline);
}

void refuse(int fd, Errc why, Clock::time_point deadline) {
  Hello h = blank_hello();
  h.refused = 1;
  h.errc = static_cast<std::uint8_t>(why);
  (void)soft::write_exact(fd, &h, sizeof h, deadline);
}

}  // namespace catena::fabric::oob
