// Publishing: a publisher appends to a partition through its chain's head.
// It writes frames into a ring registered at the head (one-sided writes into
// the head's memory), the head copies each frame into its log, decides
// idempotence, and acknowledges runs of records once the chain committed
// them. Both halves and their messages are here.
//
// The exchange:
//   publisher -> head   PublisherHello {channel, partition, route epoch,
//                       producer id and epoch, the ring size asked for, the
//                       channel generation it maps keys by}
//   head -> publisher   PublisherWelcome {status, the ring's size (clamped)
//                       and key on this connection, the head's epoch, the
//                       largest record, the next sequence it expects from
//                       this producer epoch}; refused:
//                         not_ready          the hello names a newer epoch, or a newer channel
//                                            generation than this head's marker (its marker is not
//                                            appended yet: retry)
//                         not_head           (head_hint: where the head is, if known)
//                         stale_epoch        the hello names an older epoch
//                         moved              the head is sealed: the partition's next chain takes appends
//                                            (next: its head and route epoch, once this replica was
//                                            told the route; dial it there directly)
//                         producer_fenced    a newer epoch of this producer exists
//                         resource_exhausted max_publishers or max_producers reached, or the
//                                            broker's ring memory budget
//   publisher -> ring   frames (record.hpp) at the ring's next position, as
//                       WRITEs; the last WRITE of a flush carries an
//                       immediate: the ring's written total, so the head
//                       knows how far to read (frame_ring.hpp: pads, wrap,
//                       credit)
//   head -> publisher   PublishAck {status, first_seq, count, first_offset,
//                       ring_consumed, epoch} per run of records with one
//                       outcome: ok once committed (sequences and offsets
//                       consecutive; first_offset ~0 for duplicates whose
//                       offset the head no longer knows), too_large,
//                       sequence_gap (the publisher resyncs: it reconnects and
//                       follows the welcome's next_sequence), producer_fenced,
//                       moved (sealed: nothing of the run was stored), remap
//                       (the head's marker opens a newer generation than the
//                       hello's: nothing of the run was stored; marker_generation
//                       and marker_partitions say the head's newest marker, and
//                       every later run of the session is refused alike; records
//                       stored before the marker stay, below it). Every
//                       ack returns ring credit: bytes the head has consumed.
//                       A refused run (moved, remap) leaves the producer's state
//                       as it was: the head expects the same next sequence.
//   head -> publisher   PublishHeld {reason, the log's segments, ttl, grace,
//                       when its oldest segment may be reused}: the head
//                       holds the session's frames back, unread in the ring,
//                       because the log is full (every segment holds records
//                       within ttl + grace, or not yet committed), the node's
//                       segment memory is spent, or the tenant is at its
//                       publish rate. Sent when that starts and again every
//                       kHeldNoticeNs (250 ms) while it lasts, so a publisher
//                       knows why its acks wait and that the head is alive. Nothing is
//                       refused: the frames are appended once it passes.
//   publisher -> head   PublisherGeneration {generation}: the channel
//                       generation the publisher maps keys by from here on,
//                       sent once every frame it wrote was answered (so the
//                       head has read them all). A session that names a
//                       generation newer than the head's marker waits, its
//                       frames unread, until the head appends that marker.
//                       So a publisher switches after a remap without
//                       reconnecting. Any other message ends the session.
//
// The head never trusts the ring: a publisher may rewrite it at any time, so
// each frame is copied into the log first and only the copy is checked;
// a frame that does not check out (or names another producer) ends the
// session with nothing of the batch stored. A run is acknowledged in order:
// a later outcome never overtakes an earlier ok still waiting for the commit.
//
// Threading: each half is owned by one thread (the head's data-plane thread,
// the publishing thread) and never blocks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <catena/chain/bounded_fifo.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/limits.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/partition_log.hpp>
#include <catena/chain/producer_state.hpp>
#include <catena/chain/replica_counters.hpp>
#include <catena/chain/tenant_share.hpp>
#include <catena/chain/wire.hpp>

namespace catena::chain {

// --- the messages ------------------------------------------------------------
namespace wire {

struct PublisherHello {
  ChannelRef ref;
  std::uint64_t producer_id;
  std::uint64_t producer_epoch;  // issued by the controller (RouteSource::init_producer)
  std::uint32_t ring_bytes;      // requested staging ring at the head
  std::uint32_t reserved;
  std::uint64_t generation;  // the channel generation the publisher maps keys by (0: as created)
  std::uint8_t access_secret[kAccessSecretBytes];
};

struct PublisherWelcome {
  Status status;
  std::uint16_t reserved0;
  std::uint32_t ring_bytes;
  std::uint64_t epoch;
  fabric::RemoteRegion ring;
  std::uint32_t max_record;
  std::uint32_t reserved1;
  // What the head expects next from this producer epoch: it holds every
  // sequence below and none at or above. 0 for an epoch it never saw.
  std::uint64_t next_sequence;
  char head_hint[limits::kMaxFabricAddressLength];  // on not_head: where the head is, if known
  NextChainHint next;                               // on moved: where appends go now, if known
};
static_assert(sizeof(PublisherWelcome::head_hint) == limits::kMaxFabricAddressLength);
static_assert(limits::kMaxSegmentBytes <= UINT32_MAX && limits::kMaxRecordPayload <= UINT32_MAX &&
                  limits::kMaxPublisherRing <= UINT32_MAX,
              "segment_bytes, max_record, ring_bytes and valid_end are 32-bit on the wire");

// One contiguous run of a publisher's records: seqs [first_seq, first_seq+count)
// stored at offsets [first_offset, first_offset+count) (ok), or refused.
// The commit watch (commit_watch.hpp) sends the same message, with no credit.
struct PublishAck {
  Status status;
  std::uint16_t reserved0;
  std::uint32_t count;
  std::uint64_t first_seq;
  std::uint64_t first_offset;
  std::uint64_t ring_consumed;  // bytes of the staging ring the head has consumed (total)
  std::uint64_t epoch;
  // On remap: the head's newest marker (the generation it opens and that
  // generation's partition count). 0 otherwise.
  std::uint64_t marker_generation;
  std::uint32_t marker_partitions;
  std::uint32_t reserved1;
};

template <>
constexpr Kind kind_of<PublisherHello>() {
  return Kind::publisher_hello;
}
template <>
constexpr Kind kind_of<PublisherWelcome>() {
  return Kind::publisher_welcome;
}
// The channel generation a connected publisher maps keys by from here on
// (the hello's generation, switched in band after a remap).
struct PublisherGeneration {
  std::uint64_t generation;
};

// Why a head holds a publisher's frames back (PublishHeld).
enum class HeldReason : std::uint16_t {
  none = 0,
  log_full = 1,        // every segment holds records within ttl + grace, or not yet committed
  segment_memory = 2,  // the node's segment memory budget is spent
  rate_limited = 3,    // the partition's tenant is at its publish rate on this node
};

struct PublishHeld {
  HeldReason reason;
  std::uint16_t reserved0;
  std::uint32_t segments;  // the log's segment slots
  std::uint64_t ttl_ns;
  std::uint64_t grace_ns;
  // log_full: until the log's oldest segment may be reused; 0 when its time
  // has passed and it waits for its records to commit. 0 for other reasons.
  std::uint64_t free_in_ns;
};

template <>
constexpr Kind kind_of<PublishHeld>() {
  return Kind::publish_held;
}
template <>
constexpr Kind kind_of<PublishAck>() {
  return Kind::publish_ack;
}
template <>
constexpr Kind kind_of<PublisherGeneration>() {
  return Kind::publisher_generation;
}

}  // namespace wire

// The largest record a head takes (its welcome's max_record) in a log of
// `segment_bytes` segments: a segment holds its header, the record and a
// seal. A publisher knows it from the channel's layout before any welcome.
constexpr std::uint32_t max_record_for(std::uint32_t segment_bytes) {
  constexpr std::uint32_t overhead = sizeof(SegmentHeader) + 2 * sizeof(RecordHeader);
  return segment_bytes <= overhead ? 0 : std::min<std::uint32_t>(kMaxRecordPayload, segment_bytes - overhead);
}

// --- the head's half ---------------------------------------------------------

// Registered memory that publishers' staging rings may pin on one broker,
// shared by all its replicas. Owned by the broker; data-plane thread only.
struct SessionBudget {
  std::uint64_t ring_bytes_limit = 1ull << 30;
  std::uint64_t ring_bytes_used = 0;
};

// What the replica says about itself when a publisher says hello.
struct PublishGate {
  bool authorized = true;  // the hello carries the partition's access secret
  std::uint64_t epoch = 0;
  bool head = false;
  bool sealed = false;
  std::string_view head_addr;  // where the head is (for not_head)
  // Where the partition's next range is served (for moved), once known.
  std::uint64_t next_epoch = 0;
  std::string_view next_head;
  std::uint32_t segment_bytes = 0;
  // The newest channel generation this replica's log has a marker of (0:
  // none): a hello naming a newer one is not_ready.
  std::uint64_t marker_generation = 0;
  std::uint32_t max_publishers = 256;
  std::uint32_t max_producers = 1024;
  SessionBudget* budget = nullptr;  // charged each ring's bytes while its session lives
  // The partition's tenant's share of it on this broker (TenantQuotas.
  // max_publisher_ring_bytes), charged too; nullptr: no tenant limit.
  SessionBudget* tenant_budget = nullptr;
  SessionSeats* tenant_seats = nullptr;  // the tenant's sessions on this broker; nullptr: none
};

// What the head's half appends to: the log and the producers' idempotence
// state, the replica's tick clock (producer state's idle clock), whether the
// head is sealed, and a count of garbled batches.
struct PublishTarget {
  PartitionLog& log;
  ProducerState& producers;
  std::uint64_t now_ns = 0;
  bool sealed = false;
  std::uint64_t* corrupt_frames = nullptr;
  RateBudget* rate = nullptr;           // the tenant's publish rate on this broker; nullptr: unlimited
  ReplicaCounters* counters = nullptr;  // appends, back-pressure and gaps counted here, if set
};

class PublishServer {
 public:
  // How often a head says again that it still holds a session's frames back.
  static constexpr std::uint64_t kHeldNoticeNs = 250'000'000;

  // A publisher said hello: answers, and keeps the link (and registers the
  // ring it writes into) if it is accepted.
  void attach(fabric::Provider& provider, std::unique_ptr<Link> link, const wire::PublisherHello& hello,
              const PublishGate& gate, const ProducerState& producers);

  // Reads what each publisher wrote into its ring and appends it. Returns
  // the work done (frames taken, sessions ended).
  int consume(PublishTarget& target);
  // Acknowledges each publisher's runs the commit now covers (and refusals
  // queued behind them, in order). Returns the acks sent.
  int acknowledge(std::uint64_t commit_offset, std::uint64_t epoch, ReplicaCounters* counters = nullptr);

  // Producers with an open session are in use however quiet they are.
  void touch_producers(ProducerState& producers, std::uint64_t now_ns) const;
  // Connection events of the publishers' links (a hang-up while idle).
  void poll_events();
  // Not the head any more: every publisher is disconnected (they find the
  // new head in the route).
  void drop_all();
  [[nodiscard]] std::size_t size() const { return sessions_.size(); }
  // Sessions welcomed so far (a publisher that switches its generation in
  // band opens none).
  [[nodiscard]] std::uint64_t opened() const { return opened_; }

 private:
  // One publisher: the ring it writes into (registered here, remote-
  // writable; its reader is here) and its runs waiting to be acknowledged.
  struct Session {
    struct Run {
      wire::Status status;
      std::uint32_t count;
      std::uint64_t first_seq;
      std::uint64_t first_offset;
      std::uint64_t consumed_after;  // ring bytes consumed once this run is processed
      std::uint64_t bytes = 0;       // frame bytes of the run's records (ok runs: the acked bytes)
    };
    static constexpr std::uint32_t kMaxRuns = 4096;
    static constexpr std::uint64_t kUnknownOffset = ~0ull;

    std::unique_ptr<Link> link;
    std::unique_ptr<fabric::MemoryRegion> ring;
    FrameRingReader reader;
    std::uint64_t producer_id = 0;
    std::uint64_t producer_epoch = 0;
    // The channel generation the publisher maps keys by (the hello's, then
    // each PublisherGeneration's): its frames wait while it is newer than
    // the log's marker.
    std::uint64_t generation = 0;
    // The marker its remap runs name (the log's newest when they were refused).
    PartitionLog::Marker remap_to;
    BoundedFifo<Run> runs{kMaxRuns};  // not yet acknowledged
    bool closed = false;
    SessionBudget* budget = nullptr;         // charged the ring's bytes while this session lives
    SessionBudget* tenant_budget = nullptr;  // and its tenant's share, if it has one
    Seat seat;                               // one of its tenant's sessions here
    // What the publisher was last told of frames held back (PublishHeld),
    // and when: told again only for another reason or kHeldNoticeNs later,
    // so a session that is held, appends and is held again (a tenant at its
    // rate) sends a notice an interval, not one per record.
    wire::HeldReason told = wire::HeldReason::none;
    std::uint64_t told_ns = 0;

    Session() = default;
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    ~Session() {
      if (budget != nullptr) budget->ring_bytes_used -= reader.ring_bytes();
      if (tenant_budget != nullptr) tenant_budget->ring_bytes_used -= reader.ring_bytes();
    }
  };
  int consume(Session& s, PublishTarget& target);
  // The session's next frame waits for `why`: tells the publisher, at most
  // every kHeldNoticeNs unless the reason changed.
  static void hold(Session& s, wire::HeldReason why, const PublishTarget& target);
  int acknowledge(Session& s, std::uint64_t commit_offset, std::uint64_t epoch, ReplicaCounters* counters);
  std::vector<std::unique_ptr<Session>> sessions_;
  std::uint64_t opened_ = 0;
};

// --- the publisher's half ----------------------------------------------------

// One partition's records on their way to its head: the ring's local image
// (frames are written there, then copied to the head's ring with one-sided
// writes), the records not yet acknowledged, and the session with the head.
// Records resolve in the order they were staged; on_resolved(seq, status,
// offset) is called for each, which lets the caller keep what it attaches
// to a record (a callback) in a FIFO of its own, in step.
class PublishClient {
 public:
  PublishClient() = default;
  // `mirror`: registered for local access, `ring_bytes` long; at most
  // `max_in_flight` records unacknowledged.
  PublishClient(std::unique_ptr<fabric::MemoryRegion> mirror, std::uint32_t ring_bytes,
                std::uint32_t max_in_flight);

  [[nodiscard]] static wire::PublisherHello hello(std::string_view channel, std::uint32_t partition,
                                                  std::uint64_t epoch, std::uint64_t producer_id,
                                                  std::uint64_t producer_epoch, std::uint32_t ring_bytes,
                                                  std::uint64_t generation = 0);

  // The ring's size (0: default-constructed, no ring yet).
  [[nodiscard]] std::uint32_t ring_bytes() const { return writer_.ring_bytes(); }
  // A larger (or smaller) ring in place of this one, for a new session: the
  // link is dropped, the sequence numbering goes on. Requires pending() == 0
  // (every record resolved: nothing to lay out again); false otherwise, and
  // nothing changes.
  bool replace_ring(std::unique_ptr<fabric::MemoryRegion> mirror, std::uint32_t ring_bytes);

  // --- records ---
  // Whether a payload of this size can ever be a frame of this ring.
  [[nodiscard]] bool fits(std::uint32_t payload_bytes) const;
  [[nodiscard]] bool full() const { return pending_.full(); }
  [[nodiscard]] std::size_t pending() const { return pending_.size(); }
  [[nodiscard]] std::uint64_t next_seq() const { return next_seq_; }
  // Writes the next record (sequence next_seq()) into the ring's image.
  // backpressure: the ring has no room until the head returns credit (or
  // full()). The head gets it with the next flush().
  // The frame keeps producer.flags: a record sent again after a channel
  // alter (kFlagAttributes with its block already in `payload`).
  fabric::Errc stage(const RecordHeader& producer, std::span<const std::byte> payload);
  // Same, carrying a key and headers ahead of the payload (kFlagAttributes),
  // encoded straight into the ring; `block` is attributes_size(a).
  fabric::Errc stage(const RecordHeader& producer, const Attributes& a, std::size_t block,
                     std::span<const std::byte> payload);
  // --- a zero-copy record (Publisher::try_claim): reserve, fill, commit ---
  // A frame reserved for the caller to fill in place: where it goes in the
  // ring's image, and its size. Nothing is placed, numbered or sent until
  // commit_reserved(), so dropping a reservation (an abort) leaves no trace. While one is open the caller
  // stages nothing else into this ring (its frame would go where the
  // reservation is) and does not attach() (resend() lays the ring out again).
  struct Reservation {
    std::uint32_t pos = 0;          // the frame's offset in the ring
    std::uint32_t frame_bytes = 0;  // frame_size(region)
    std::uint32_t region = 0;       // the payload region's bytes (what the frame's length counts)
  };
  // backpressure: no room (or full()) until the head returns credit. The
  // region starts at region_at(r) and stays valid until the commit.
  fabric::Errc reserve(std::uint32_t region_bytes, Reservation* out);
  [[nodiscard]] std::byte* region_at(const Reservation& r) const {
    return mirror_->data() + r.pos + sizeof(RecordHeader);
  }
  // Makes the filled reservation the next record (sequence next_seq()), as
  // stage() would: checksummed in place, `producer.flags` kept. If the ring
  // started over meanwhile (fail_all), the frame is moved to its new place.
  fabric::Errc commit_reserved(const RecordHeader& producer, const Reservation& r);

  // Bytes staged and not yet sent.
  [[nodiscard]] std::uint64_t unflushed() const { return writer_.written() - writer_.flushed(); }
  // Bytes of the ring written and not yet taken by the head.
  [[nodiscard]] std::uint64_t ring_in_use() const { return writer_.written() - writer_.consumed(); }
  // Sends what is staged (stops where the send queue is full; call again).
  void flush();

  // --- the head's session ---
  // The head welcomed us (status ok). False if it is not this producer's
  // epoch's head any more: it expects sequences this publisher never sent
  // (another process publishes with the same producer epoch); then nothing
  // is attached and the caller fails every pending record (fenced).
  // Otherwise the pending records go into the new ring again (renumbered
  // from the welcome's next_sequence if the head holds none of them) and
  // are sent.
  bool attach(std::unique_ptr<Link> link, const wire::PublisherWelcome& welcome);
  void drop() { link_.reset(); }
  [[nodiscard]] bool connected() const { return link_ != nullptr; }
  [[nodiscard]] bool broken() const { return link_ == nullptr || link_->broken(); }
  // Messages taken from the head and the commit watch so far: acks,
  // resolving or not, and held notices (a head that answers is alive).
  [[nodiscard]] std::uint64_t acks() const { return acks_; }
  // The head's last PublishHeld since the previous call, if one came.
  [[nodiscard]] std::optional<wire::PublishHeld> take_held() {
    auto h = held_;
    held_.reset();
    return h;
  }

  // What an ack told besides resolved records.
  enum class Event : std::uint8_t {
    none,
    resync,  // sequence_gap: the head holds none of the run; reconnect and follow its welcome
    moved,   // the head was sealed: reconnect to the partition's next chain
    remap,   // the head's marker opens a newer generation: refused() records wait to be mapped again
  };
  // Applies one ack (from the head or the commit watch; the first to
  // resolve a record wins, the second finds it gone). Returns the records
  // it resolved.
  template <class OnResolved>
  int on_ack(const wire::PublishAck& ack, Event* event, OnResolved&& on_resolved) {
    ++acks_;
    // A gap or a seal: none of the run was stored and its records stay
    // pending for the next session, which the caller opens next. Their room
    // in the ring is not given back: records staged meanwhile wait beside
    // them, and together they still fit a ring from its start (resend()).
    // Were it given back, up to a window of records could pile up behind
    // them, more than one ring: the next session could not lay them out.
    if (ack.status == wire::Status::sequence_gap) {
      *event = Event::resync;
      return 0;
    }
    if (ack.status == wire::Status::moved) {
      // Sealed: none of these were stored (every record it did store was
      // acknowledged before this); the next chain's head has this
      // producer's state and takes them.
      *event = Event::moved;
      return 0;
    }
    (void)writer_.credit_st(ack.ring_consumed);  // 0 from the commit watch: ignored
    if (ack.status == wire::Status::remap) {
      // Nothing of the run was stored; the records stay pending (the last
      // refused() of them) until the caller maps them again (take_all).
      *event = Event::remap;
      if (ack.marker_generation >= remap_generation_) {
        remap_generation_ = ack.marker_generation;
        remap_partitions_ = ack.marker_partitions;
      }
      refused_ = std::min<std::uint64_t>(pending_.size(), refused_ + ack.count);
      return 0;
    }
    int resolved = 0;
    for (std::uint32_t i = 0; i < ack.count && !pending_.empty(); ++i) {
      const std::uint64_t seq = ack.first_seq + i;
      if (pending_.front().seq != seq) continue;  // an ack for a record already resolved
      const std::uint64_t offset =
          ack.status == wire::Status::ok ? (ack.first_offset == ~0ull ? ~0ull : ack.first_offset + i) : 0;
      pending_.pop_front();
      ++resolved;
      on_resolved(seq, ack.status, offset);
    }
    return resolved;
  }
  // Reads the head's acks (on_ack for each). Returns the records resolved.
  template <class OnResolved>
  int do_work(Event* event, OnResolved&& on_resolved) {
    int resolved = 0;
    link_->poll_send();
    link_->poll_recv(
        [&](const std::byte* msg, std::uint32_t len) {
          if (auto ack = wire::decode<wire::PublishAck>(msg, len)) {
            resolved += on_ack(*ack, event, on_resolved);
          } else if (auto held = wire::decode<wire::PublishHeld>(msg, len)) {
            ++acks_;
            held_ = *held;
          }
        },
        [](std::uint32_t, std::uint32_t) {});
    return resolved;
  }
  // --- a channel alter (remap) ---
  // Pending records the head refused with remap (the last ones pending), and
  // the newest marker such a refusal named (generation 0: none yet).
  [[nodiscard]] std::uint64_t refused() const { return refused_; }
  [[nodiscard]] std::uint64_t remap_generation() const { return remap_generation_; }
  [[nodiscard]] std::uint32_t remap_partitions() const { return remap_partitions_; }
  // Takes every pending record out, in order: take(header, payload) for
  // each (the frame in the ring's image, valid during the call). None of
  // them was stored (the caller waits until every pending record was
  // refused), so the next sequence goes back to the first of them; the
  // session is dropped and the ring starts empty.
  template <class Take>
  void take_all(Take&& take) {
    take_refused(take);
    writer_.reset_st();
    link_.reset();
  }
  // The same, in band: the session stays, and so does the ring's position
  // (the head has read every frame: each was answered), and the head is
  // told the generation the publisher maps keys by from here on. False if
  // that could not be sent: the session is dropped then, as by take_all.
  template <class Take>
  bool take_all_in_band(std::uint64_t generation, Take&& take) {
    take_refused(take);
    if (link_ && !link_->broken() && link_->send(wire::PublisherGeneration{generation}) == fabric::Errc::ok) {
      link_->poll_send();
      return true;
    }
    writer_.reset_st();
    link_.reset();
    return false;
  }

  // Every pending record resolves with `status` (offset 0), in order; the
  // ring starts empty.
  template <class OnResolved>
  void fail_all(wire::Status status, OnResolved&& on_resolved) {
    while (!pending_.empty()) {
      const std::uint64_t seq = pending_.front().seq;
      pending_.pop_front();
      on_resolved(seq, status, std::uint64_t{0});
    }
    writer_.reset_st();
  }

 private:
  struct Pending {
    std::uint64_t seq;
    std::uint32_t frame_bytes;
    std::uint32_t pos;  // where the frame starts in the ring
  };
  RingStatus place(std::uint32_t frame_bytes, std::uint32_t* pos);
  void resend();
  template <class Take>
  void take_refused(Take& take) {
    if (!pending_.empty()) next_seq_ = pending_.front().seq;
    while (!pending_.empty()) {
      const Pending& p = pending_.front();
      const std::byte* f = mirror_->data() + p.pos;
      RecordHeader h;
      std::memcpy(&h, f, sizeof h);
      take(h, std::span<const std::byte>(f + sizeof h, h.length));
      pending_.pop_front();
    }
    refused_ = 0;
    remap_generation_ = 0;
    remap_partitions_ = 0;
  }

  std::unique_ptr<fabric::MemoryRegion> mirror_;
  FrameRingWriter writer_;  // credit comes from the head's acks
  BoundedFifo<Pending> pending_;
  std::uint64_t next_seq_ = 0;
  std::uint64_t acks_ = 0;
  std::optional<wire::PublishHeld> held_;
  std::uint64_t refused_ = 0;
  std::uint64_t remap_generation_ = 0;
  std::uint32_t remap_partitions_ = 0;
  std::unique_ptr<Link> link_;
  fabric::RemoteRegion ring_{};
};

}  // namespace catena::chain
