// The out-of-band connection handshake the dpdk provider and the verbs
// provider's oob mode ("verbs:<dev>,oob") share, as perftest connects
// without rdma_cm: over a TCP connection each side sends one fixed-size
// Hello with its RC QP number, first PSN, GID (IPv4-mapped), MAC, path MTU
// and queue depths. The dialing side writes first; the listening side
// answers with its own Hello, or with one marked refused (and why). The TCP
// connection then stays open as the liveness channel: its end is the
// peer's disconnect. ci/vm/rxe_interop.c speaks the same bytes.
//
// Setup path only: every call blocks, bounded by its deadline.
#pragma once

#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <catena/fabric/result.hpp>

namespace catena::fabric::oob {

using Clock = std::chrono::steady_clock;

inline constexpr std::uint32_t kHelloMagic = 0x43524f43;  // "CROC"
// Version 1: the 48 bytes up to `domain` (what ci/vm/rxe_interop.c
// speaks). Version 2 adds `domain`: sent only for a connection outside the
// default protection domain, so a default one is still version 1.
inline constexpr std::uint16_t kHelloVersion = 1;
inline constexpr std::uint16_t kHelloVersionDomain = 2;
inline constexpr std::size_t kHelloV1Bytes = 48;
// How long a listener waits for an accepted connection's Hello.
inline constexpr std::chrono::seconds kServerHandshakeTimeout{5};

struct Hello {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t refused;  // reply: 1 if the server refused the connection
  std::uint8_t errc;     // reply: why (an Errc)
  std::uint32_t qpn;
  std::uint32_t psn;
  std::uint8_t gid[16];
  std::uint8_t mac[6];
  std::uint16_t mtu;  // path MTU in bytes (256..4096)
  std::uint32_t sq_depth;
  std::uint32_t rq_depth;
  std::uint64_t domain;  // version 2 only (0 when version 1)
};
static_assert(sizeof(Hello) == 56 && offsetof(Hello, domain) == kHelloV1Bytes);
// It travels in host order, as ci/vm/rxe_interop.c sends it too.
static_assert(std::endian::native == std::endian::little, "the Hello is little-endian on the wire");

// A Hello with magic and version set, everything else zero. dial() and
// reply() send version 2 if `domain` is set.
[[nodiscard]] Hello blank_hello() noexcept;
[[nodiscard]] bool valid(const Hello& h) noexcept;
// The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), host order.
[[nodiscard]] std::uint32_t gid_ipv4(const Hello& h) noexcept;
// Writes the IPv4-mapped GID of `ip` (host order) into h.gid.
void set_gid_ipv4(Hello& h, std::uint32_t ip) noexcept;

// Dialing side: sends `mine` on the connected socket `fd`, reads the
// listener's answer. Errc::refused (or the listener's own reason) if it
// refused or hung up, Errc::io_error for a bad answer, Errc::timeout.
Result<Hello> dial(int fd, const Hello& mine, Clock::time_point deadline, std::string_view peer);
// Listening side: reads the dialer's Hello. Errc::io_error if it sent
// garbage or hung up (the listener then waits for the next peer).
Result<Hello> read_request(int fd, Clock::time_point deadline);
// Listening side: true if the dialer has already closed its end (it gave
// up, e.g. its timeout passed while the connection waited in the backlog).
[[nodiscard]] bool dialer_gone(int fd) noexcept;
// Listening side: answers with `mine`, or refuses with `why`.
Result<void> reply(int fd, const Hello& mine, Clock::time_point deadline);
void refuse(int fd, Errc why, Clock::time_point deadline);

}  // namespace catena::fabric::oob
