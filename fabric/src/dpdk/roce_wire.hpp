// The RoCEv2 wire format the dpdk provider speaks: Ethernet / IPv4 / UDP
// 4791 / BTH, then RETH, AETH and ImmDt as the opcode requires, the payload
// padded to 4 bytes, and the ICRC. Pure byte work: no DPDK, no allocation,
// so the codec is tested on its own and the RC engine (rc_engine.hpp) runs
// over any packet I/O.
//
// The ICRC is what rdma_rxe computes (drivers/infiniband/sw/rxe/rxe_icrc.c):
// CRC-32 (the IEEE polynomial, zlib's crc32) over 8 bytes of 0xff standing
// for the masked LRH, then the IPv4 header with TOS, TTL and checksum masked
// to ones, the UDP header with its checksum masked to ones, the BTH with its
// reserved byte before the destination QP (FECN/BECN) masked to ones, the
// rest of the transport headers, the payload and the pad. It travels
// little-endian (rxe stores the CPU-order value of the inverted CRC).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace catena::fabric::roce {

inline constexpr std::uint16_t kRoceUdpPort = 4791;
inline constexpr std::size_t kEthLen = 14;
inline constexpr std::size_t kIpv4Len = 20;
inline constexpr std::size_t kUdpLen = 8;
inline constexpr std::size_t kBthLen = 12;
inline constexpr std::size_t kRethLen = 16;
inline constexpr std::size_t kAethLen = 4;
inline constexpr std::size_t kImmLen = 4;
inline constexpr std::size_t kIcrcLen = 4;
// Ethernet + IPv4 + UDP: what precedes the BTH.
inline constexpr std::size_t kL2L4Len = kEthLen + kIpv4Len + kUdpLen;
// The largest header stack a frame carries (BTH + RETH + ImmDt; AETH never
// comes with a RETH), before the payload.
inline constexpr std::size_t kMaxHeaderLen = kL2L4Len + kBthLen + kRethLen + kImmLen;
inline constexpr std::uint32_t kPsnMask = 0xffffff;
inline constexpr std::uint16_t kDefaultPkey = 0xffff;

// RC opcodes (IBA table 38, transport 000).
enum class Op : std::uint8_t {
  send_first = 0x00,
  send_middle = 0x01,
  send_last = 0x02,
  send_last_imm = 0x03,
  send_only = 0x04,
  send_only_imm = 0x05,
  write_first = 0x06,
  write_middle = 0x07,
  write_last = 0x08,
  write_last_imm = 0x09,
  write_only = 0x0a,
  write_only_imm = 0x0b,
  read_request = 0x0c,
  read_response_first = 0x0d,
  read_response_middle = 0x0e,
  read_response_last = 0x0f,
  read_response_only = 0x10,
  acknowledge = 0x11,
};

// Which headers and payload an opcode carries.
struct OpLayout {
  bool valid = false;
  bool reth = false;
  bool aeth = false;
  bool imm = false;
  bool payload = false;
  bool first = false;  // starts a message (FIRST or ONLY)
  bool last = false;   // ends a message (LAST or ONLY)
};
[[nodiscard]] OpLayout layout_of(std::uint8_t opcode) noexcept;

// AETH syndromes (IBA 9.7.5.2.1): the top three bits say ACK, RNR NAK or
// NAK; the low five carry the credit count, the RNR timer or the NAK code.
inline constexpr std::uint8_t kAethAck = 0x1f;  // ACK, credits "invalid" (no end-to-end flow control)
inline constexpr std::uint8_t kAethRnrNak = 0x20;
inline constexpr std::uint8_t kAethNakPsnSeq = 0x60;
inline constexpr std::uint8_t kAethNakInvalidRequest = 0x61;
inline constexpr std::uint8_t kAethNakRemoteAccess = 0x62;
inline constexpr std::uint8_t kAethNakRemoteOperational = 0x63;
[[nodiscard]] inline bool aeth_is_ack(std::uint8_t s) noexcept {
  return (s & 0xe0) == 0x00;
}
[[nodiscard]] inline bool aeth_is_rnr(std::uint8_t s) noexcept {
  return (s & 0xe0) == 0x20;
}
[[nodiscard]] inline bool aeth_is_nak(std::uint8_t s) noexcept {
  return (s & 0xe0) == 0x60;
}

// PSN arithmetic in the 24-bit circle.
[[nodiscard]] inline std::uint32_t psn_add(std::uint32_t psn, std::uint32_t n) noexcept {
  return (psn + n) & kPsnMask;
}
// a - b as a signed distance (|distance| < 2^23).
[[nodiscard]] inline std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) noexcept {
  return static_cast<std::int32_t>((a - b) << 8) >> 8;
}

using Mac = std::array<std::uint8_t, 6>;

// One direction of a connection, as the frames carry it. IPv4 addresses in
// host order.
struct Path {
  Mac src_mac{};
  Mac dst_mac{};
  std::uint32_t src_ip = 0;
  std::uint32_t dst_ip = 0;
  std::uint16_t src_port = 0xc000;  // UDP source port (rxe: 0xc000 + hash of the QPN)
  std::uint8_t ttl = 64;
  std::uint8_t tos = 0;
  std::uint32_t dest_qpn = 0;
};

struct Bth {
  std::uint8_t opcode = 0;
  bool solicited = false;
  bool ack_req = false;
  std::uint8_t pad = 0;  // filled in by build_frame
  std::uint16_t pkey = kDefaultPkey;
  std::uint32_t dest_qpn = 0;
  std::uint32_t psn = 0;
};

struct Reth {
  std::uint64_t va = 0;
  std::uint32_t rkey = 0;
  std::uint32_t dma_len = 0;
};

struct Aeth {
  std::uint8_t syndrome = kAethAck;
  std::uint32_t msn = 0;
};

// What build_frame writes and parse_frame reads. `payload` points into the
// caller's buffer (build) or into the frame (parse).
struct Packet {
  Bth bth;
  Reth reth;
  Aeth aeth;
  std::uint32_t imm = 0;  // in host order; the wire carries it big-endian
  const std::byte* payload = nullptr;
  std::uint32_t payload_len = 0;
  // Filled in by parse_frame: who sent it.
  Mac src_mac{};
  std::uint32_t src_ip = 0;
  std::uint16_t src_port = 0;
};

[[nodiscard]] inline std::size_t frame_length(std::uint8_t opcode, std::uint32_t payload_len) noexcept {
  const OpLayout l = layout_of(opcode);
  return kL2L4Len + kBthLen + (l.reth ? kRethLen : 0) + (l.aeth ? kAethLen : 0) + (l.imm ? kImmLen : 0) +
         ((payload_len + 3u) & ~3u) + kIcrcLen;
}

// Writes the whole frame for `p` on `path` (the BTH's destination QP comes
// from the path) into `out` and returns its length, or 0 if `out` is too
// small or the opcode unknown. `ip_id` is the IPv4 identification field.
std::size_t build_frame(const Path& path, const Packet& p, std::uint16_t ip_id,
                        std::span<std::byte> out) noexcept;

enum class ParseStatus : std::uint8_t {
  ok,
  not_roce,   // not IPv4/UDP to port 4791 (ARP, other traffic): not ours
  malformed,  // truncated, lengths that disagree, unknown opcode
  bad_icrc,   // the invariant CRC does not match
};

// Parses and validates (lengths, ICRC) one frame into `out`.
ParseStatus parse_frame(std::span<const std::byte> frame, Packet& out) noexcept;

// ARP for the port's own address: if `frame` is an ARP request for `ip`
// (host order), turns it in place into the reply from `mac` and returns true.
bool arp_reply_in_place(std::span<std::byte> frame, const Mac& mac, std::uint32_t ip) noexcept;

// The ICRC of a frame whose IPv4 header starts at `ip` and whose transport
// headers, payload and pad end `ip_to_pad_len` bytes later (the ICRC field
// itself excluded), as the value read little-endian from the wire.
[[nodiscard]] std::uint32_t icrc(const std::byte* ip, std::size_t ip_to_pad_len) noexcept;

}  // namespace catena::fabric::roce
