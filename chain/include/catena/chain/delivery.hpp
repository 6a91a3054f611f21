// Delivery: a subscriber reads a partition's committed records from one
// replica, which writes them straight from segment memory into the
// subscriber's frame ring with one-sided writes. Both halves and their
// messages are here.
//
// The exchange:
//   subscriber -> replica  SubscriberHello {channel, partition, epoch (0: any
//                          up to the replica's; a sealed range's replicas
//                          are asked at the range's epoch), start mode
//                          (earliest, latest, offset) and offset, the ring's
//                          size and its key on this connection}
//   replica -> subscriber  SubscriberWelcome {status, first offset it will
//                          deliver, its commit offset, its epoch}; refused:
//                            not_ready          the hello names a newer epoch
//                            bad_request        a ring too small or unaligned, an unknown mode,
//                                               or an offset past the end
//                            moved              the offset is at or past the end of the
//                                               range this replica keeps (start_offset: the end;
//                                               next: where the next range is served, if known)
//                            resource_exhausted max_subscribers reached
//                            position_expired   the offset fell out of retention
//                                               (start_offset: the oldest retained)
//   replica -> ring        committed frames, each run of frames contiguous in
//                          one segment and in the ring as one WRITE, the last
//                          as WRITE WITH IMMEDIATE (frame_ring.hpp: the ring's
//                          rules, pads included); at most kBudget bytes per
//                          subscriber per pass
//   subscriber -> replica  SubscriberCredit {ring bytes consumed, total}
//   replica -> subscriber  SubscriberNotice {position_expired, next offset}
//                          when the subscriber lagged past retention, once;
//                          {moved, range end, next} when it reached the end of
//                          the sealed range the replica keeps (partition
//                          handoff): the subscriber goes on at the next
//                          range's head (next), or where the controller says.
//
// What the subscriber checks, and why it then reads elsewhere: a ring
// overrun (the replica claimed more than the ring holds), a garbled frame,
// a payload whose checksum does not match, an offset other than the next
// one expected (DeliveryClient::Fault). It never skips an offset silently.
//
// Threading: each half is owned by one thread (the replica's data-plane
// thread, the subscriber's polling thread) and never blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include <catena/chain/frame_ring.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/partition_log.hpp>
#include <catena/chain/scratch_ring.hpp>
#include <catena/chain/tenant_share.hpp>
#include <catena/chain/wire.hpp>

namespace catena::chain {

// --- the messages ------------------------------------------------------------
namespace wire {

enum class StartMode : std::uint32_t { earliest = 0, latest = 1, offset = 2 };

struct SubscriberHello {
  ChannelRef ref;
  StartMode mode;
  std::uint32_t ring_bytes;
  std::uint64_t start_offset;
  fabric::RemoteRegion ring;
  std::uint8_t access_secret[kAccessSecretBytes];
};

struct SubscriberWelcome {
  Status status;
  std::uint16_t reserved0;
  std::uint32_t reserved1;
  std::uint64_t start_offset;  // first offset that will be delivered
  std::uint64_t commit_offset;
  std::uint64_t epoch;
  NextChainHint next;  // on moved: where the next range is served, if known
};

struct SubscriberCredit {
  std::uint64_t consumed;  // total ring bytes consumed by the subscriber
};

struct SubscriberNotice {
  Status status;  // position_expired, moved
  std::uint16_t reserved0;
  std::uint32_t reserved1;
  std::uint64_t next_offset;  // position_expired: oldest retained offset; moved: the range's end
  NextChainHint next;         // on moved: where the next range is served, if known
};

template <>
constexpr Kind kind_of<SubscriberHello>() {
  return Kind::subscriber_hello;
}
template <>
constexpr Kind kind_of<SubscriberWelcome>() {
  return Kind::subscriber_welcome;
}
template <>
constexpr Kind kind_of<SubscriberCredit>() {
  return Kind::subscriber_credit;
}
template <>
constexpr Kind kind_of<SubscriberNotice>() {
  return Kind::subscriber_notice;
}

}  // namespace wire

// --- the replica's half ------------------------------------------------------

// What the replica says about itself when a subscriber says hello.
struct DeliveryGate {
  static constexpr std::uint64_t kOpenRange = ~0ull;
  bool authorized = true;  // the hello carries the partition's access secret
  std::uint64_t epoch = 0;
  std::uint64_t range_end = kOpenRange;  // a sealed range ends here (partition handoff)
  // Where the range after it is served, once known (for moved).
  std::uint64_t next_epoch = 0;
  std::string_view next_head;
  std::uint32_t max_subscribers = 256;
  std::uint32_t segment_bytes = 0;       // a subscriber's ring holds at least one segment's frame
  SessionSeats* tenant_seats = nullptr;  // the tenant's sessions on this broker; nullptr: none
};

// Where delivered bytes come from: the log, its slots' registered regions
// (slot s of the log is region s), and scratch memory for pads.
struct DeliverySource {
  const PartitionLog& log;
  const std::vector<std::unique_ptr<fabric::MemoryRegion>>& slot_regions;
  ScratchRing& scratch;
  std::uint64_t range_end = DeliveryGate::kOpenRange;
  std::uint64_t next_epoch = 0;  // where the range after range_end is served, once known
  std::string_view next_head;
};

class DeliveryServer {
 public:
  // Bytes delivered to one subscriber per pass, so one fast reader does not
  // hold the thread while others wait.
  static constexpr std::uint32_t kBudget = 1u << 20;

  // A subscriber said hello: answers, and keeps the link if it is accepted.
  void attach(std::unique_ptr<Link> link, const wire::SubscriberHello& hello, const DeliveryGate& gate,
              const PartitionLog& log);

  // One pass: each subscriber's credit, then its next committed frames.
  // Returns the work done (writes posted, notices, hang-ups).
  int do_work(const DeliverySource& src);

  // Connection events of the subscribers' links (a hang-up while idle).
  void poll_events();
  // Every subscriber is disconnected (the partition's access secret changed).
  void drop_all();

  [[nodiscard]] std::size_t size() const { return sessions_.size(); }

 private:
  struct Session {
    std::unique_ptr<Link> link;
    fabric::RemoteRegion ring{};
    FrameRingWriter writer;
    Cursor cursor;
    std::uint64_t next_offset = 0;
    bool notified_expired = false;
    bool notified_moved = false;
    bool closed = false;
    Seat seat;  // one of its tenant's sessions here
  };
  int deliver(Session& s, const DeliverySource& src);

  std::vector<std::unique_ptr<Session>> sessions_;
};

// --- the subscriber's half ---------------------------------------------------

class DeliveryClient {
 public:
  // Why a pass stopped reading from this replica (the subscriber then reads
  // from the next offset elsewhere).
  enum class Fault : std::uint8_t { none, overrun, garbled, bad_checksum, out_of_order };
  // For logs: "the replica overran the ring", ...
  [[nodiscard]] static const char* describe(Fault f) noexcept;

  DeliveryClient() = default;
  // `ring`: registered for local and remote writes, `ring_bytes` long
  // (align_ring_bytes, at least one segment and kMinRingBytes).
  DeliveryClient(std::unique_ptr<fabric::MemoryRegion> ring, std::uint32_t ring_bytes)
      : ring_(std::move(ring)), reader_(ring_->data(), ring_bytes), ring_bytes_(ring_bytes) {}

  // The hello asking to read from `start_offset` (mode offset), or from the
  // oldest or newest record.
  [[nodiscard]] wire::SubscriberHello hello(std::string_view channel, std::uint32_t partition,
                                            std::uint64_t epoch, wire::StartMode mode,
                                            std::uint64_t start_offset) const;
  // Puts the ring's key for this connection (Endpoint::expose) into the hello.
  fabric::Result<void> grant(fabric::Endpoint& ep, wire::SubscriberHello& hello) const;

  // The replica welcomed us (status ok): records come from welcome.start_offset on.
  void attach(std::unique_ptr<Link> link, std::uint64_t start_offset) {
    link_ = std::move(link);
    reader_.reset_st();
    expected_ = start_offset;
  }
  void drop() { link_.reset(); }
  [[nodiscard]] bool connected() const { return link_ != nullptr; }
  [[nodiscard]] bool broken() const { return link_ == nullptr || link_->broken(); }
  // The offset the next record must have.
  [[nodiscard]] std::uint64_t expected() const { return expected_; }

  // One pass: on_notice(wire::Status, next_offset, const wire::NextChainHint&)
  // for each notice, then
  // on_record(const RecordHeader&, std::span<const std::byte> payload) for
  // each record in offset order, at most `max`, ending after a marker
  // (kFlagMarker: the subscriber decides whether to read past it); then
  // ring credit back. Returns the records delivered; *fault says why the pass stopped early.
  // After a position_expired notice no record is read: the replica delivers
  // nothing more at this position, the subscriber starts again where the
  // notice says.
  template <class OnNotice, class OnRecord>
  int do_work(int max, Fault* fault, OnNotice&& on_notice, OnRecord&& on_record) {
    *fault = Fault::none;
    int delivered = 0;
    bool expired = false;
    link_->poll_send();
    link_->poll_recv(
        [&](const std::byte* msg, std::uint32_t len) {
          auto n = wire::decode<wire::SubscriberNotice>(msg, len);
          if (!n) return;
          expired = expired || n->status == wire::Status::position_expired;
          on_notice(n->status, n->next_offset, n->next);
        },
        [&](std::uint32_t imm, std::uint32_t) { reader_.on_immediate_st(imm); });
    if (reader_.overrun()) {
      *fault = Fault::overrun;
      return 0;
    }
    while (!expired && delivered < max) {
      RingFrame f;
      const RingRead next = reader_.next_st(&f);
      if (next == RingRead::empty) break;
      if (next == RingRead::garbled) {
        *fault = Fault::garbled;
        break;
      }
      if (f.header.payload_crc != payload_checksum(f.payload())) {
        *fault = Fault::bad_checksum;
        break;
      }
      reader_.consume_st(f);
      if (f.header.offset != expected_) {
        *fault = Fault::out_of_order;
        break;
      }
      ++expected_;
      ++delivered;
      on_record(f.header, f.payload());
      if ((f.header.flags & kFlagMarker) != 0) break;  // the caller may park there (MarkerGate)
    }
    if (reader_.credit_due() && link_->send(wire::SubscriberCredit{reader_.consumed()}) == fabric::Errc::ok) {
      reader_.credited_st();
    }
    return delivered;
  }

 private:
  std::unique_ptr<fabric::MemoryRegion> ring_;
  FrameRingReader reader_;
  std::uint32_t ring_bytes_ = 0;
  std::unique_ptr<Link> link_;
  std::uint64_t expected_ = 0;
};

}  // namespace catena::chain
