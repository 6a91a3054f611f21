// RoCEv2 frames off the wire (fabric/src/dpdk/roce_wire.cpp): what the dpdk
// provider's port hands parse_frame() is whatever arrived on the NIC.
//
// Each input is one of:
//   raw        the bytes are a frame;
//   fixed up   the bytes are a frame made to look like RoCEv2 (IPv4, UDP to
//              port 4791, UDP length from the IP length, a correct ICRC,
//              each unless the input says not), so that the fuzzer reaches
//              the opcode, header and padding checks behind the ICRC;
//   built      a packet from the input, built with build_frame().
// Every frame sits in a heap buffer of exactly its size.
//
// Properties: a parsed packet's payload lies inside the frame, within what
// the IP length says; rebuilt with build_frame() it parses to the same
// packet; a frame build_frame() makes parses back to what it was built from;
// a frame with one flipped bit that the ICRC covers does not parse as ok.
#include <cstdint>
#include <cstring>
#include <fuzzer/FuzzedDataProvider.h>
#include <vector>

#include "dpdk/roce_wire.hpp"
#include "fuzz_check.hpp"

using namespace catena::fabric::roce;

namespace {

void put16(std::byte* p, std::uint16_t v) {
  p[0] = std::byte(static_cast<std::uint8_t>(v >> 8));
  p[1] = std::byte(static_cast<std::uint8_t>(v));
}
std::uint16_t get16(const std::byte* p) {
  return static_cast<std::uint16_t>(std::to_integer<unsigned>(p[0]) << 8 | std::to_integer<unsigned>(p[1]));
}

bool same(const Packet& a, const Packet& b) {
  return a.bth.opcode == b.bth.opcode && a.bth.solicited == b.bth.solicited &&
         a.bth.ack_req == b.bth.ack_req && a.bth.pkey == b.bth.pkey && a.bth.dest_qpn == b.bth.dest_qpn &&
         a.bth.psn == b.bth.psn &&
         (!layout_of(a.bth.opcode).reth ||
          (a.reth.va == b.reth.va && a.reth.rkey == b.reth.rkey && a.reth.dma_len == b.reth.dma_len)) &&
         (!layout_of(a.bth.opcode).aeth ||
          (a.aeth.syndrome == b.aeth.syndrome && a.aeth.msn == b.aeth.msn)) &&
         (!layout_of(a.bth.opcode).imm || a.imm == b.imm) && a.payload_len == b.payload_len &&
         (a.payload_len == 0 || std::memcmp(a.payload, b.payload, a.payload_len) == 0);
}

// Parses `frame`; on ok checks the packet and that it survives a rebuild.
ParseStatus parse_and_check(const std::vector<std::byte>& frame) {
  Packet p;
  const ParseStatus s = parse_frame(frame, p);
  if (s != ParseStatus::ok) return s;
  const OpLayout l = layout_of(p.bth.opcode);
  FUZZ_CHECK(l.valid);
  FUZZ_CHECK(l.payload || p.payload_len == 0);
  const std::size_t ip_len = get16(frame.data() + kEthLen + 2);
  const std::byte* end = frame.data() + kEthLen + ip_len - kIcrcLen;
  FUZZ_CHECK(p.payload >= frame.data() + kL2L4Len + kBthLen && p.payload + p.payload_len <= end);
  FUZZ_CHECK(p.bth.dest_qpn <= kPsnMask && p.bth.psn <= kPsnMask && p.bth.pad < 4);
  // Rebuilt (as a peer that says the same would send it), it reads the same.
  Path path;
  path.dest_qpn = p.bth.dest_qpn;
  path.src_ip = p.src_ip;
  path.src_port = p.src_port;
  path.src_mac = p.src_mac;
  Packet q = p;
  q.bth.dest_qpn = path.dest_qpn;
  std::vector<std::byte> again(frame_length(p.bth.opcode, p.payload_len));
  const std::size_t n = build_frame(path, q, 7, again);
  if (n == 0) {
    FUZZ_CHECK(again.size() - kEthLen > 0xffff);
    return s;
  }
  FUZZ_CHECK(n == again.size());
  Packet r;
  FUZZ_CHECK(parse_frame(again, r) == ParseStatus::ok);
  FUZZ_CHECK(same(p, r));
  return s;
}

void fix_up(std::vector<std::byte>& f, FuzzedDataProvider& in) {
  if (f.size() < kL2L4Len) return;
  std::byte* ip = f.data() + kEthLen;
  std::byte* udp = ip + kIpv4Len;
  if (in.ConsumeIntegralInRange(0, 7) != 0) {
    put16(f.data() + 12, 0x0800);
    ip[0] = std::byte{0x45};
    ip[9] = std::byte{17};
    put16(udp + 2, kRoceUdpPort);
  }
  std::size_t ip_len = f.size() - kEthLen;
  if (in.ConsumeBool()) ip_len = in.ConsumeIntegralInRange<std::size_t>(0, ip_len);  // trailing bytes
  if (ip_len > 0xffff) return;
  put16(ip + 2, static_cast<std::uint16_t>(ip_len));
  if (!in.ConsumeBool()) put16(udp + 4, static_cast<std::uint16_t>(ip_len - kIpv4Len));
  if (ip_len < kIpv4Len + kUdpLen + kBthLen + kIcrcLen || in.ConsumeIntegralInRange(0, 15) == 0) return;
  const std::uint32_t crc = icrc(ip, ip_len - kIcrcLen);
  for (int i = 0; i < 4; ++i)
    ip[ip_len - kIcrcLen + i] = std::byte(static_cast<std::uint8_t>(crc >> (8 * i)));
}

void built(FuzzedDataProvider& in) {
  Path path;
  path.src_ip = in.ConsumeIntegral<std::uint32_t>();
  path.dst_ip = in.ConsumeIntegral<std::uint32_t>();
  path.src_port = in.ConsumeIntegral<std::uint16_t>();
  path.ttl = in.ConsumeIntegral<std::uint8_t>();
  path.tos = in.ConsumeIntegral<std::uint8_t>();
  path.dest_qpn = in.ConsumeIntegral<std::uint32_t>() & kPsnMask;
  Packet p;
  p.bth.opcode = in.ConsumeIntegralInRange<std::uint8_t>(0, 0x12);
  p.bth.solicited = in.ConsumeBool();
  p.bth.ack_req = in.ConsumeBool();
  p.bth.pkey = in.ConsumeIntegral<std::uint16_t>();
  p.bth.psn = in.ConsumeIntegral<std::uint32_t>() & kPsnMask;
  p.bth.dest_qpn = path.dest_qpn;
  p.reth = Reth{in.ConsumeIntegral<std::uint64_t>(), in.ConsumeIntegral<std::uint32_t>(),
                in.ConsumeIntegral<std::uint32_t>()};
  p.aeth = Aeth{in.ConsumeIntegral<std::uint8_t>(), in.ConsumeIntegral<std::uint32_t>() & kPsnMask};
  p.imm = in.ConsumeIntegral<std::uint32_t>();
  const std::size_t flip = in.ConsumeIntegral<std::uint16_t>();
  const std::vector<std::uint8_t> payload = in.ConsumeRemainingBytes<std::uint8_t>();
  p.payload = reinterpret_cast<const std::byte*>(payload.data());
  p.payload_len = static_cast<std::uint32_t>(payload.size());
  const OpLayout l = layout_of(p.bth.opcode);
  if (!l.payload) p.payload_len = 0;
  std::vector<std::byte> f(frame_length(p.bth.opcode, p.payload_len));
  const std::size_t n = build_frame(path, p, 1, f);
  if (!l.valid) {
    FUZZ_CHECK(n == 0);
    return;
  }
  FUZZ_CHECK(n == f.size());
  Packet r;
  FUZZ_CHECK(parse_frame(f, r) == ParseStatus::ok);
  FUZZ_CHECK(same(p, r));
  FUZZ_CHECK(r.src_ip == path.src_ip && r.src_port == path.src_port);
  // One flipped bit the ICRC covers (not a variant field, not the MACs) is
  // never taken for the packet that was sent.
  const std::size_t covered = f.size() - kEthLen;
  const std::size_t bit = flip % (covered * 8);
  const std::size_t byte = kEthLen + bit / 8;
  const std::size_t in_ip = byte - kEthLen;
  const bool variant = in_ip == 1 || in_ip == 8 || in_ip == 10 || in_ip == 11 || in_ip == kIpv4Len + 6 ||
                       in_ip == kIpv4Len + 7 || in_ip == kIpv4Len + kUdpLen + 4;
  f[byte] ^= std::byte(static_cast<std::uint8_t>(1u << (bit % 8)));
  Packet s;
  if (!variant) FUZZ_CHECK(parse_frame(f, s) != ParseStatus::ok);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int mode = in.ConsumeIntegralInRange(0, 2);
  if (mode == 2) {
    built(in);
    return 0;
  }
  const std::size_t len = in.ConsumeIntegralInRange<std::size_t>(0, 9000);
  const std::vector<std::uint8_t> bytes = in.ConsumeBytes<std::uint8_t>(len);
  std::vector<std::byte> frame(bytes.size());
  if (!bytes.empty()) std::memcpy(frame.data(), bytes.data(), bytes.size());
  if (mode == 1) fix_up(frame, in);
  (void)parse_and_check(frame);
  return 0;
}
