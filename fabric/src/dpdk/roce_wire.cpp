#include "dpdk/roce_wire.hpp"

#include <zlib.h>

#include <cstring>

namespace catena::fabric::roce {
namespace {

constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
constexpr std::uint8_t kIpProtoUdp = 17;
constexpr std::uint16_t kIpDontFragment = 0x4000;

void put16(std::byte* p, std::uint16_t v) noexcept {
  p[0] = std::byte(v >> 8);
  p[1] = std::byte(v);
}
void put24(std::byte* p, std::uint32_t v) noexcept {
  p[0] = std::byte(v >> 16);
  p[1] = std::byte(v >> 8);
  p[2] = std::byte(v);
}
void put32(std::byte* p, std::uint32_t v) noexcept {
  put16(p, static_cast<std::uint16_t>(v >> 16));
  put16(p + 2, static_cast<std::uint16_t>(v));
}
void put64(std::byte* p, std::uint64_t v) noexcept {
  put32(p, static_cast<std::uint32_t>(v >> 32));
  put32(p + 4, static_cast<std::uint32_t>(v));
}
std::uint16_t get16(const std::byte* p) noexcept {
  return static_cast<std::uint16_t>((std::to_integer<unsigned>(p[0]) << 8) | std::to_integer<unsigned>(p[1]));
}
std::uint32_t get24(const std::byte* p) noexcept {
  return (std::to_integer<std::uint32_t>(p[0]) << 16) | (std::to_integer<std::uint32_t>(p[1]) << 8) |
         std::to_integer<std::uint32_t>(p[2]);
}
std::uint32_t get32(const std::byte* p) noexcept {
  return (static_cast<std::uint32_t>(get16(p)) << 16) | get16(p + 2);
}
std::uint64_t get64(const std::byte* p) noexcept {
  return (static_cast<std::uint64_t>(get32(p)) << 32) | get32(p + 4);
}

std::uint16_t ipv4_checksum(const std::byte* h) noexcept {
  std::uint32_t sum = 0;
  for (std::size_t i = 0; i < kIpv4Len; i += 2) sum += get16(h + i);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

std::uint32_t crc_update(std::uint32_t crc, const std::byte* p, std::size_t n) noexcept {
  return static_cast<std::uint32_t>(crc32(crc, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(n)));
}

constexpr std::array<OpLayout, 0x12> kLayouts = [] {
  std::array<OpLayout, 0x12> t{};
  //                 valid reth  aeth   imm    payload first  last
  t[0x00] = OpLayout{true, false, false, false, true, true, false};
  t[0x01] = OpLayout{true, false, false, false, true, false, false};
  t[0x02] = OpLayout{true, false, false, false, true, false, true};
  t[0x03] = OpLayout{true, false, false, true, true, false, true};
  t[0x04] = OpLayout{true, false, false, false, true, true, true};
  t[0x05] = OpLayout{true, false, false, true, true, true, true};
  t[0x06] = OpLayout{true, true, false, false, true, true, false};
  t[0x07] = OpLayout{true, false, false, false, true, false, false};
  t[0x08] = OpLayout{true, false, false, false, true, false, true};
  t[0x09] = OpLayout{true, false, false, true, true, false, true};
  t[0x0a] = OpLayout{true, true, false, false, true, true, true};
  t[0x0b] = OpLayout{true, true, false, true, true, true, true};
  t[0x0c] = OpLayout{true, true, false, false, false, true, true};
  t[0x0d] = OpLayout{true, false, true, false, true, true, false};
  t[0x0e] = OpLayout{true, false, false, false, true, false, false};
  t[0x0f] = OpLayout{true, false, true, false, true, false, true};
  t[0x10] = OpLayout{true, false, true, false, true, true, true};
  t[0x11] = OpLayout{true, false, true, false, false, true, true};
  return t;
}();

}  // namespace

OpLayout layout_of(std::uint8_t opcode) noexcept {
  return opcode < kLayouts.size() ? kLayouts[opcode] : OpLayout{};
}

std::uint32_t icrc(const std::byte* ip, std::size_t ip_to_pad_len) noexcept {
  constexpr std::size_t kMasked = kIpv4Len + kUdpLen + kBthLen;
  static constexpr std::byte kMaskedLrh[8] = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                              std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                              std::byte{0xff}, std::byte{0xff}};
  std::byte h[kMasked];
  std::memcpy(h, ip, kMasked);
  h[1] = std::byte{0xff};                               // IPv4 TOS
  h[8] = std::byte{0xff};                               // IPv4 TTL
  h[10] = h[11] = std::byte{0xff};                      // IPv4 header checksum
  h[kIpv4Len + 6] = h[kIpv4Len + 7] = std::byte{0xff};  // UDP checksum
  h[kIpv4Len + kUdpLen + 4] = std::byte{0xff};          // BTH FECN/BECN/reserved byte
  std::uint32_t crc = crc_update(0, kMaskedLrh, sizeof kMaskedLrh);
  crc = crc_update(crc, h, kMasked);
  return crc_update(crc, ip + kMasked, ip_to_pad_len - kMasked);
}

std::size_t build_frame(const Path& path, const Packet& p, std::uint16_t ip_id,
                        std::span<std::byte> out) noexcept {
  const OpLayout l = layout_of(p.bth.opcode);
  if (!l.valid) return 0;
  const std::uint32_t payload = l.payload ? p.payload_len : 0;
  const std::size_t len = frame_length(p.bth.opcode, payload);
  if (len > out.size() || len - kEthLen > 0xffff) return 0;
  std::byte* f = out.data();
  std::memcpy(f, path.dst_mac.data(), 6);
  std::memcpy(f + 6, path.src_mac.data(), 6);
  put16(f + 12, kEtherTypeIpv4);

  std::byte* ip = f + kEthLen;
  ip[0] = std::byte{0x45};
  ip[1] = std::byte{path.tos};
  put16(ip + 2, static_cast<std::uint16_t>(len - kEthLen));
  put16(ip + 4, ip_id);
  put16(ip + 6, kIpDontFragment);
  ip[8] = std::byte{path.ttl};
  ip[9] = std::byte{kIpProtoUdp};
  put16(ip + 10, 0);
  put32(ip + 12, path.src_ip);
  put32(ip + 16, path.dst_ip);
  put16(ip + 10, ipv4_checksum(ip));

  std::byte* udp = ip + kIpv4Len;
  put16(udp, path.src_port);
  put16(udp + 2, kRoceUdpPort);
  put16(udp + 4, static_cast<std::uint16_t>(len - kEthLen - kIpv4Len));
  put16(udp + 6, 0);  // no UDP checksum: the ICRC covers the transport (as rxe sends it)

  const std::uint8_t pad = static_cast<std::uint8_t>((4 - (payload & 3)) & 3);
  std::byte* h = udp + kUdpLen;
  h[0] = std::byte{p.bth.opcode};
  h[1] = std::byte(static_cast<std::uint8_t>((p.bth.solicited ? 0x80 : 0) | (pad << 4)));
  put16(h + 2, p.bth.pkey);
  h[4] = std::byte{0};
  put24(h + 5, path.dest_qpn & kPsnMask);
  h[8] = std::byte(static_cast<std::uint8_t>(p.bth.ack_req ? 0x80 : 0));
  put24(h + 9, p.bth.psn & kPsnMask);
  h += kBthLen;
  if (l.reth) {
    put64(h, p.reth.va);
    put32(h + 8, p.reth.rkey);
    put32(h + 12, p.reth.dma_len);
    h += kRethLen;
  }
  if (l.aeth) {
    h[0] = std::byte{p.aeth.syndrome};
    put24(h + 1, p.aeth.msn);
    h += kAethLen;
  }
  if (l.imm) {
    put32(h, p.imm);
    h += kImmLen;
  }
  if (payload > 0) std::memcpy(h, p.payload, payload);
  h += payload;
  for (std::uint8_t i = 0; i < pad; ++i) *h++ = std::byte{0};
  const std::uint32_t crc = icrc(ip, static_cast<std::size_t>(h - ip));
  for (int i = 0; i < 4; ++i) h[i] = std::byte(static_cast<std::uint8_t>(crc >> (8 * i)));
  return len;
}

ParseStatus parse_frame(std::span<const std::byte> frame, Packet& out) noexcept {
  if (frame.size() < kL2L4Len) return ParseStatus::not_roce;
  const std::byte* f = frame.data();
  if (get16(f + 12) != kEtherTypeIpv4) return ParseStatus::not_roce;
  const std::byte* ip = f + kEthLen;
  if (ip[0] != std::byte{0x45} || ip[9] != std::byte{kIpProtoUdp}) return ParseStatus::not_roce;
  const std::byte* udp = ip + kIpv4Len;
  if (get16(udp + 2) != kRoceUdpPort) return ParseStatus::not_roce;
  const std::size_t ip_len = get16(ip + 2);
  if (ip_len < kIpv4Len + kUdpLen + kBthLen + kIcrcLen || kEthLen + ip_len > frame.size() ||
      get16(udp + 4) != ip_len - kIpv4Len) {
    return ParseStatus::malformed;
  }
  const std::byte* h = udp + kUdpLen;
  const std::byte* end = ip + ip_len - kIcrcLen;  // where the ICRC starts
  const OpLayout l = layout_of(std::to_integer<std::uint8_t>(h[0]));
  if (!l.valid) return ParseStatus::malformed;
  const std::size_t hdrs =
      kBthLen + (l.reth ? kRethLen : 0) + (l.aeth ? kAethLen : 0) + (l.imm ? kImmLen : 0);
  if (static_cast<std::size_t>(end - h) < hdrs) return ParseStatus::malformed;
  const std::uint8_t pad = (std::to_integer<std::uint8_t>(h[1]) >> 4) & 3;
  const std::size_t body = static_cast<std::size_t>(end - h) - hdrs;
  if (body < pad || (body & 3) != 0 || (!l.payload && body != 0)) return ParseStatus::malformed;
  std::uint32_t wire_crc = 0;
  for (int i = 0; i < 4; ++i) wire_crc |= std::to_integer<std::uint32_t>(end[i]) << (8 * i);
  if (icrc(ip, static_cast<std::size_t>(end - ip)) != wire_crc) return ParseStatus::bad_icrc;

  out.bth.opcode = std::to_integer<std::uint8_t>(h[0]);
  out.bth.solicited = (std::to_integer<std::uint8_t>(h[1]) & 0x80) != 0;
  out.bth.pad = pad;
  out.bth.pkey = get16(h + 2);
  out.bth.dest_qpn = get24(h + 5);
  out.bth.ack_req = (std::to_integer<std::uint8_t>(h[8]) & 0x80) != 0;
  out.bth.psn = get24(h + 9);
  h += kBthLen;
  if (l.reth) {
    out.reth = Reth{get64(h), get32(h + 8), get32(h + 12)};
    h += kRethLen;
  }
  if (l.aeth) {
    out.aeth = Aeth{std::to_integer<std::uint8_t>(h[0]), get24(h + 1)};
    h += kAethLen;
  }
  if (l.imm) {
    out.imm = get32(h);
    h += kImmLen;
  }
  out.payload = h;
  out.payload_len = static_cast<std::uint32_t>(body - pad);
  std::memcpy(out.src_mac.data(), f + 6, 6);
  out.src_ip = get32(ip + 12);
  out.src_port = get16(udp);
  return ParseStatus::ok;
}

bool arp_reply_in_place(std::span<std::byte> frame, const Mac& mac, std::uint32_t ip) noexcept {
  constexpr std::size_t kArpLen = 28;
  if (frame.size() < kEthLen + kArpLen) return false;
  std::byte* f = frame.data();
  std::byte* a = f + kEthLen;
  if (get16(f + 12) != 0x0806 || get16(a) != 1 || get16(a + 2) != kEtherTypeIpv4 || a[4] != std::byte{6} ||
      a[5] != std::byte{4} || get16(a + 6) != 1 || get32(a + 24) != ip) {
    return false;
  }
  std::byte requester[10];  // its MAC and IPv4 address
  std::memcpy(requester, a + 8, 10);
  put16(a + 6, 2);
  std::memcpy(a + 8, mac.data(), 6);
  put32(a + 14, ip);
  std::memcpy(a + 18, requester, 10);
  std::memcpy(f, requester, 6);
  std::memcpy(f + 6, mac.data(), 6);
  return true;
}

}  // namespace catena::fabric::roce
