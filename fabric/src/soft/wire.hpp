// What soft TCP endpoints put on the wire after the handshake: a stream of
// frames, each a fixed 32-byte header and `len` payload bytes.
//
// Requests (write, write_imm, send, read_req) carry their sequence number;
// the peer executes them in order and reports progress with `ack`, the
// count of the receiver's requests it has executed, stamped on every frame
// it sends (so acknowledgements ride on the reverse traffic and a ping-pong
// needs one send per hop). An initiator that has waited a while for an
// answer sends ack_request, which gets the target's attention even if its
// owner stopped polling right after the request arrived. A read is answered by read_resp carrying its
// data; a request that fails at the target is answered by nak, after which
// both sides are in error. Host byte order: both ends are little-endian.
#pragma once

#include <bit>
#include <cstdint>

namespace catena::fabric::soft {

static_assert(std::endian::native == std::endian::little, "the soft wire format is little-endian");

inline constexpr std::uint8_t kFrameMagic = 0xCA;

enum class FrameOp : std::uint8_t {
  write = 1,        // payload to [addr, addr+len) under rkey
  write_imm = 2,    // same, then consumes a receive with `imm`
  send = 3,         // payload into the next posted receive
  read_req = 4,     // asks for [addr, addr+len) under rkey; no payload
  read_resp = 5,    // answers request `seq` with len bytes
  nak = 6,          // request `seq` failed; `status` is the initiator's WcStatus
  ack = 7,          // nothing but `ack`
  ack_request = 8,  // "I am waiting": answer with an ack if one is owed
};
inline constexpr std::uint8_t kMaxFrameOp = 8;

struct FrameHeader {
  std::uint8_t magic;
  std::uint8_t op;
  std::uint8_t status;
  std::uint8_t flags;  // reserved, 0
  std::uint32_t len;
  std::uint32_t rkey;
  std::uint32_t imm;
  std::uint64_t addr;
  std::uint32_t seq;
  std::uint32_t ack;
};
static_assert(sizeof(FrameHeader) == 32);

inline bool is_request(FrameOp op) {
  return op == FrameOp::write || op == FrameOp::write_imm || op == FrameOp::send || op == FrameOp::read_req;
}

}  // namespace catena::fabric::soft
