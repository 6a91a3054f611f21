// The shared-memory half of a same-host connection. Each side places one
// ChannelBlock in its own arena and tells the peer where it is at handshake:
//
//   token   written by the owner, read by the peer before every access to the
//           owner's arena; the owner clears it to fence the peer out.
//   busy    the owner's *initiator* access counter: odd while the owner is
//           copying into or out of the peer's arena (the peer's AccessGuard).
//   rnr_waiting  set by the peer when a request of its found no posted
//           receive; the owner's post_recv() clears it and kicks the peer's
//           connection manager (one byte on the control socket), which
//           retries the request: RNR retry without the peer having to poll.
//   slots   the owner's receive queue. Slot n (mod capacity) is posted by the
//           owner (descriptor, then seq = 2n+1, release) and filled by the
//           peer's SEND or WRITE WITH IMMEDIATE (result, then seq = 2n+2,
//           release). A filled slot is the receive completion; a posted one is
//           the credit the peer needs before it may execute such a request
//           (no posted slot: the request waits, infinite RNR retry).
//
// Everything a peer wrote is read after an acquire load of the word that
// published it and validated before use.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "soft/arena.hpp"
#include "soft/core.hpp"

namespace catena::fabric::soft {

struct alignas(64) RecvSlot {
  std::atomic<std::uint64_t> seq;
  // Descriptor, by the owner.
  std::uint64_t buf_addr;  // offset of the receive buffer in the region of buf_key
  std::uint32_t buf_len;
  std::uint32_t buf_key;
  // Result, by the peer.
  std::uint32_t byte_len;
  std::uint32_t imm;
  std::uint8_t opcode;  // Opcode::recv or Opcode::recv_write_imm
  std::uint8_t status;  // WcStatus for the receive completion
  std::uint8_t has_imm;
};
static_assert(sizeof(RecvSlot) == 64);

struct ChannelBlock {
  alignas(64) std::atomic<std::uint64_t> token;
  alignas(64) std::atomic<std::uint64_t> busy;
  alignas(64) std::atomic<std::uint32_t> rnr_waiting;
};
static_assert(sizeof(ChannelBlock) == 192);

// The only byte ever sent on a shared-memory connection's control socket.
inline constexpr char kKickByte = 'k';

inline std::uint64_t channel_bytes(std::uint32_t capacity) {
  return sizeof(ChannelBlock) + std::uint64_t{capacity} * sizeof(RecvSlot);
}

// Whether a peer's announced channel lies inside its mapped arena.
inline bool channel_fits(const ArenaView& v, std::uint64_t offset, std::uint32_t capacity) {
  return capacity != 0 && (capacity & (capacity - 1)) == 0 && capacity <= (1u << 16) && offset % 64 == 0 &&
         offset >= kDataOffset && offset <= v.size && channel_bytes(capacity) <= v.size - offset;
}

// Our ChannelBlock, owned. Freed by revoking the token and waiting out the
// peer's accesses in flight; the memory is then only ever reused for another
// ChannelBlock (Arena::free_channel_range).
class OwnChannel {
 public:
  static Result<OwnChannel> allocate(std::shared_ptr<Core> core, std::uint32_t capacity);
  OwnChannel() = default;
  OwnChannel(OwnChannel&& o) noexcept { *this = std::move(o); }
  OwnChannel& operator=(OwnChannel&& o) noexcept;
  ~OwnChannel() { release(); }

  [[nodiscard]] bool valid() const noexcept { return core_ != nullptr; }
  [[nodiscard]] ChannelBlock* block() const noexcept {
    return reinterpret_cast<ChannelBlock*>(core_->view().base + offset_);
  }
  [[nodiscard]] RecvSlot* slots() const noexcept {
    return reinterpret_cast<RecvSlot*>(core_->view().base + offset_ + sizeof(ChannelBlock));
  }
  [[nodiscard]] std::uint64_t offset() const noexcept { return offset_; }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::uint64_t token() const noexcept { return token_; }
  void release();

 private:
  std::shared_ptr<Core> core_;
  std::uint64_t offset_ = 0;
  std::uint32_t capacity_ = 0;
  std::uint64_t token_ = 0;
};

// The peer's half of a same-host connection, as set up by the handshake.
struct ShmPeer {
  std::shared_ptr<PeerArena> arena;
  std::uint64_t channel_offset = 0;
  std::uint32_t channel_capacity = 0;
  std::uint64_t token = 0;
  // Keeps our frees and disconnects waiting for the peer's accesses in flight.
  std::unique_ptr<GuardRegistration> guard;
};

}  // namespace catena::fabric::soft
