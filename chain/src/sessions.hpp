// Client sessions of a Replica (private to the chain layer).
#pragma once

#include <catena/chain/replica.hpp>

#include <vector>

namespace catena::chain {

// A publisher attached to the head. It writes frames into `ring` (registered
// here, remote-writable) and rings the doorbell with a WRITE WITH IMMEDIATE
// carrying its total bytes written / 8 (mod 2^32).
struct Replica::PublisherSession {
  struct Pending {
    wire::Status status;
    std::uint32_t count;
    std::uint64_t first_seq;
    std::uint64_t first_offset;
    std::uint64_t consumed_after;  // ring bytes consumed once this run is processed
  };
  static constexpr std::uint32_t kMaxPending = 4096;
  static constexpr std::uint64_t kUnknownOffset = ~0ull;

  std::unique_ptr<Link> link;
  std::unique_ptr<fabric::MemoryRegion> ring;
  std::uint32_t ring_bytes = 0;
  std::uint64_t producer_id = 0;
  std::uint64_t producer_epoch = 0;
  std::uint64_t written = 0;
  std::uint64_t consumed = 0;
  std::vector<Pending> pending = std::vector<Pending>(kMaxPending);  // FIFO ring
  std::uint32_t pending_head = 0;
  std::uint32_t pending_count = 0;
  bool closed = false;
  SessionBudget* budget = nullptr;  // charged ring_bytes while this session lives

  PublisherSession() = default;
  PublisherSession(const PublisherSession&) = delete;
  PublisherSession& operator=(const PublisherSession&) = delete;
  ~PublisherSession() {
    if (budget != nullptr) budget->ring_bytes_used -= ring_bytes;
  }

  Pending* last_pending() {
    return pending_count ? &pending[(pending_head + pending_count - 1) % kMaxPending] : nullptr;
  }
};

// A subscriber served by this replica: committed frames are written straight
// from segment memory into its ring; it returns credit with SENDs.
struct Replica::SubscriberSession {
  std::unique_ptr<Link> link;
  fabric::RemoteRegion ring{};
  std::uint32_t ring_bytes = 0;
  std::uint64_t written = 0;
  std::uint64_t consumed = 0;
  Cursor cursor;
  std::uint64_t next_offset = 0;
  std::uint32_t scratch_slot = 0;
  bool notified_expired = false;
  bool closed = false;
};

// A publisher's commit watch at the tail: the run of its records seen in
// this pass is acknowledged at the end of the pass.
struct Replica::WatchSession {
  std::unique_ptr<Link> link;
  std::uint64_t producer_id = 0;
  std::uint64_t producer_epoch = 0;
  std::uint64_t first_seq = 0;
  std::uint32_t count = 0;
  std::uint64_t first_offset = 0;
  bool closed = false;
};

// Reconstructs a 64-bit byte count from a doorbell immediate (count/8 mod 2^32).
inline std::uint64_t advance_total(std::uint64_t total, std::uint32_t imm) {
  const std::uint32_t low = static_cast<std::uint32_t>(total / 8);
  return total + static_cast<std::uint64_t>(imm - low) * 8;
}

}  // namespace catena::chain
