// Client sessions of a Replica (private to the chain layer).
#pragma once

#include <vector>

#include <catena/chain/bounded_fifo.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/replica.hpp>

namespace catena::chain {

// A publisher attached to the head. It writes frames into `ring` (registered
// here, remote-writable), a frame ring whose reader is here, and rings the
// doorbell with a WRITE WITH IMMEDIATE. Ring credit goes back in the acks: a
// run's `consumed_after`.
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
  FrameRingReader reader;
  std::uint64_t producer_id = 0;
  std::uint64_t producer_epoch = 0;
  BoundedFifo<Pending> pending{kMaxPending};  // runs not yet acknowledged
  bool closed = false;
  SessionBudget* budget = nullptr;  // charged the ring's bytes while this session lives

  PublisherSession() = default;
  PublisherSession(const PublisherSession&) = delete;
  PublisherSession& operator=(const PublisherSession&) = delete;
  ~PublisherSession() {
    if (budget != nullptr) budget->ring_bytes_used -= reader.ring_bytes();
  }
};

// A subscriber served by this replica: committed frames are written straight
// from segment memory into its frame ring, whose writer is here; it returns
// credit with SENDs.
struct Replica::SubscriberSession {
  std::unique_ptr<Link> link;
  fabric::RemoteRegion ring{};
  FrameRingWriter writer;
  Cursor cursor;
  std::uint64_t next_offset = 0;
  bool notified_expired = false;
  bool notified_moved = false;
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

}  // namespace catena::chain
