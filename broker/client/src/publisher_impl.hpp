// Publisher::Impl: one session per partition with its head (and a commit
// watch with its tail). publisher.cpp has the publishing path (records into
// the ring, acknowledgements, resyncs); publisher_connect.cpp how a session
// reaches its head and tail without poll() waiting: each connection is an
// attempt in states (route lookup, connect, welcome) that poll() advances,
// the lookup and the connect running on the publisher's workers
// (client_worker.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catena/broker/client_error.hpp>
#include <catena/broker/publisher.hpp>
#include <catena/broker/routes.hpp>
#include <catena/chain/bounded_fifo.hpp>
#include <catena/chain/commit_watch.hpp>
#include <catena/chain/frame_ring.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/record.hpp>
#include <catena/fabric/fabric.hpp>
#include <catena/fabric/thread_owner.hpp>

#include "client_worker.hpp"
#include "dial_attempt.hpp"

namespace catena {

// What the publisher keeps of each record not yet resolved, in step with
// its partition's PublishClient pending records (they resolve in order):
// the application's callback and, for a channel alter (a head answers
// remap), what it needs to send the record again by the new mapping.
struct PendingRecord {
  enum class Placement : std::uint8_t {
    keyed,     // by its key's hash (publish with a key)
    any,       // round-robin (publish without a key)
    explicit_  // publish_to: this partition only
  };
  PublishCallback cb;
  std::uint64_t order = 0;     // publish order across every partition
  std::uint64_t key_hash = 0;  // xxh64 of the key (keyed)
  Placement placement = Placement::any;
};

// A partition the head said it holds back is taken as flowing again once
// the head has not said so for this long (it says so every
// PublishServer::kHeldNoticeNs while it lasts).
inline constexpr std::chrono::milliseconds kHeldQuiet{1000};

// One partition's session with its head, and its commit watch with the tail.
// Owned by the publishing thread, like the Publisher.
struct PartitionSession {
  using Clock = std::chrono::steady_clock;
  // What the route lookup in progress is for.
  // dial_check: a head dial has waited stall_check for its answer (a head
  // stopped or cut off answers nothing until connect_timeout).
  enum class Lookup : std::uint8_t { connect, stall_check, watch, dial_check };

  std::uint32_t partition = 0;
  // The ring (and the FIFOs) are allocated on the partition's first record
  // (Publisher::Impl::activate_st); until then it has no session either.
  bool active = false;
  bool connected_once = false;  // its first connection is no `reconnected` event
  // Growing its ring (PublisherOptions::ring_bytes): the size asked for,
  // waiting until every record in flight is resolved (0: none); then, until
  // the head welcomes the larger ring, `growing` (new records wait) and the
  // size to go back to if it refuses it (its ring budget). grow_refused: a
  // head refused once; this session does not ask again.
  // The same path halves a ring (grow_to below its size) whose records
  // took at most a quarter of it (ring_peak: the most bytes written and not
  // yet taken by the head) since ring_window (PublisherOptions::ring_shrink_after).
  std::uint32_t grow_to = 0;
  bool growing = false;
  std::uint32_t grown_from = 0;
  bool grow_refused = false;
  std::uint64_t ring_peak = 0;
  Clock::time_point ring_window{};
  Route route;
  chain::PublishClient head;       // the records, their ring and the head's session (publish.hpp)
  chain::CommitWatchClient watch;  // the tail's early acks (chains of 2 or more)
  // The records not yet resolved (callbacks, placement), in step with
  // `head`'s pending records (they resolve in order).
  chain::BoundedFifo<PendingRecord> records;
  Clock::time_point linger_start{};
  Clock::time_point down_since{};
  Clock::time_point retry_at{};
  Clock::time_point watch_at{};
  Clock::time_point last_progress{};  // last ack, or the publish that found nothing pending
  Clock::time_point route_check_at{};
  std::chrono::milliseconds watch_backoff{0};
  bool down = false;
  bool resync = false;  // the head reported a sequence gap: reconnect and follow its welcome
  bool moved = false;   // the head was sealed (partition handoff): reconnect to the new chain's head
  // Following a move: the route epoch whose head was sealed (0: none), and
  // since when. Until the controller publishes the next chain (a few ms
  // after the seal) the route is re-read without dialling the sealed head
  // again, and the new head, which the controller configures just after
  // publishing the route, is retried at once rather than backed off.
  std::uint64_t moved_epoch = 0;
  Clock::time_point moved_since{};
  // Where a sealed head said appends go now (wire::NextChainHint: the new
  // head and its route epoch; 0: none). While following a move it is dialled
  // before the controller is asked, and, with no hint yet, every other
  // attempt asks the sealed head itself (probe_sealed), which learns the
  // hint with the route that retires it. A hint that failed is not taken
  // again (hint_failed: its epoch).
  std::uint64_t hint_epoch = 0;
  std::string hint_head;
  std::uint64_t hint_failed = 0;
  bool probe_sealed = false;
  // A channel alter's switch dropped a working session only to name the new
  // generation in its hello (the in-band message could not be sent): attempts
  // dial the same head at the same route
  // epoch, with no route lookup, while it answers not_ready (its marker is
  // not in yet); any other failure asks the controller as usual.
  bool redial_head = false;
  // A grow or shrink dropped the session for a new ring: the next attempt
  // dials the route's head again without a lookup (once).
  bool redial_resized = false;
  std::chrono::milliseconds redial_wait{0};
  // Between connect attempts while the partition is down: 2 ms doubling to
  // 50 ms, so a head that crashed is left as soon as the controller has
  // repaired the chain (a few ms), and an outage costs 20 lookups a second.
  std::chrono::milliseconds connect_backoff{0};
  // Where the partition's chain starts (Route::start_offset), once known: a
  // chain rebuilt after every copy was lost starts higher.
  std::uint64_t chain_start = 0;
  bool chain_start_known = false;

  // What the application was last told (PublisherOptions::on_event): the
  // route epoch and head link it saw, and whether a stall was reported.
  std::uint64_t seen_epoch = 0;
  std::uint64_t seen_link = 0;
  bool stall_reported = false;
  // Why the head holds this partition's records back (its last PublishHeld;
  // none once it has not said so for kHeldQuiet), and when it last said so.
  chain::wire::HeldReason held = chain::wire::HeldReason::none;
  Clock::time_point held_at{};

  // An open claim (Publisher::try_claim, publisher_claim.cpp): its frame
  // reserved in the ring, how its record is placed, its frame flags, and
  // its ticket (0: none open). While one is open nothing else is staged
  // here and a welcome is not taken (attaching lays the ring out again).
  chain::PublishClient::Reservation claim;
  PendingRecord claim_how;
  std::uint32_t claim_flags = 0;
  std::uint64_t claim_ticket = 0;

  // --- reaching the head and the tail (publisher_connect.cpp) ---
  // Bumped whenever the head link is set or dropped: a stall check or watch
  // lookup answered for an earlier link is dropped.
  std::uint64_t link_gen = 0;
  // One route lookup at a time, whatever it is for.
  client_detail::RouteCall lookup;
  Lookup lookup_for = Lookup::connect;
  std::uint64_t lookup_link = 0;  // link_gen when it was asked
  // The head: an attempt runs while there is no link.
  client_detail::Attempt attempt = client_detail::Attempt::none;
  bool attempt_follows_move = false;
  bool attempt_hinted = false;  // dialling the hint, not the route's head
  ReplicaAddress dialled;       // the head being dialled (no node id when hinted)
  // Bumped at each head dial: a dial check answered for an earlier dial is
  // dropped. dial_started: when the dial in progress began.
  std::uint64_t dial_gen = 0;
  std::uint64_t lookup_dial = 0;  // dial_gen when it was asked
  Clock::time_point dial_started{};
  client_detail::DialAttempt<chain::wire::PublisherHello, chain::wire::PublisherWelcome> dial;
  // The tail's commit watch: an attempt runs while the head link is up and
  // there is no watch.
  client_detail::Attempt watch_attempt = client_detail::Attempt::none;
  client_detail::DialAttempt<chain::wire::CommitWatchHello, chain::wire::CommitWatchWelcome> watch_dial;
};

class CATENA_LOCAL Publisher::Impl {
 public:
  using Clock = std::chrono::steady_clock;
  // Following a partition move: how often the route and the new head are
  // tried, and for how long before the usual back-off applies again.
  static constexpr std::chrono::milliseconds kMoveRetry{2};
  static constexpr std::chrono::milliseconds kMoveFollow{2000};

  Impl(RouteSource& routes, std::string channel, const PublisherOptions& opts);

  client::Result<void> init();
  fabric::Errc publish_to(std::uint32_t partition, std::span<const std::byte> payload, PublishCallback cb,
                          const chain::Attributes* attrs = nullptr);
  // By the key's hash under the current generation (round-robin without a key).
  // With `attrs`, the record carries its key and headers (kFlagAttributes).
  fabric::Errc publish_keyed(std::span<const std::byte> key, std::span<const std::byte> payload,
                             PublishCallback cb, const chain::Attributes* attrs = nullptr);
  // Stages one record (stamped `timestamp_ns`, 0: now) into its partition's
  // ring; takes `cb` only if it was staged. With `attrs` the key and headers
  // go ahead of the payload; otherwise the frame has `flags` (a resent
  // record's kFlagAttributes, its block already in `payload`).
  fabric::Errc stage_st(std::uint32_t partition, const PendingRecord& how, std::span<const std::byte> payload,
                        PublishCallback& cb, std::uint64_t timestamp_ns = 0,
                        const chain::Attributes* attrs = nullptr, std::uint32_t flags = 0);
  // The header of this publisher's next record: `flags` (and kFlagTrace
  // when tracing stages), stamped `timestamp_ns` (0: now).
  [[nodiscard]] chain::RecordHeader record_header_st(std::uint32_t flags, std::uint64_t timestamp_ns) const;
  // A record just went into s's ring (by stage_st or commit_claim_st):
  // takes `rec`, starts the linger if it opened a batch (and the stall
  // check if the partition was idle), flushes by the linger rule.
  // `opens_batch` and `was_idle` describe the ring before the record.
  void staged_st(PartitionSession& s, bool opens_batch, bool was_idle, PendingRecord rec);
  [[nodiscard]] std::uint32_t partitions() const { return partitions_; }
  int poll();
  bool flush(std::chrono::milliseconds timeout);

  // --- the publishing path (publisher.cpp) ---
  // One ack from the head or the watch: resolves records, or says the head
  // must be redialled (a resync or a move). Returns the records resolved.
  int on_ack_st(PartitionSession& s, const chain::wire::PublishAck& ack);
  void fail_all_st(PartitionSession& s, chain::wire::Status st);
  // A partition's session, not connected and with no ring (activate_st
  // allocates it on the first record). Thread-safe: an alter's added
  // partitions are built on a worker.
  static std::unique_ptr<PartitionSession> new_session(std::uint32_t partition);

  // --- ring sizes (publisher.cpp) ---
  // The ring a frame of `frame_bytes` needs: the smallest of the minimum
  // doubled that holds it (a frame takes at most half a ring), at most
  // ring_bytes_.
  [[nodiscard]] std::uint32_t ring_for_st(std::uint32_t frame_bytes) const;
  // Whether s can take a record whose frame counts `region` bytes now: its
  // ring made (the first record), not growing, and large enough; or asks
  // for a larger ring (backpressure) or answers too_large, disconnected.
  [[nodiscard]] fabric::Errc room_for_st(PartitionSession& s, std::size_t region);
  // A stage or reserve answered backpressure: a ring that was full (not the
  // window) grows once its records are resolved, if the budget has room.
  void ring_was_full_st(PartitionSession& s);
  // Whether rings may take `more` bytes more and still leave the minimum
  // for every other partition without one (no loop: a back-pressured
  // publish may ask).
  [[nodiscard]] bool budget_allows_st(std::uint64_t more, const PartitionSession& s) const;
  // active_in_gen_ again, for a new partition count (a channel alter).
  void recount_active_st();
  // The first record to a partition: its ring (the minimum), its FIFOs,
  // and the connect. ok, or resource_exhausted (no memory, or no room in
  // ring_budget_bytes: rings are kept while the publisher lives, so never).
  fabric::Errc activate_st(PartitionSession& s, Clock::time_point now);
  // A grow asked for (grow_to) once every record is resolved: the larger
  // ring and a new session with the head.
  void grow_st(PartitionSession& s, Clock::time_point now);
  // Asks for a halved ring (grow_to) when the partition's last
  // ring_shrink_after used at most a quarter of it; starts the next window.
  void consider_shrink_st(PartitionSession& s, Clock::time_point now);
  // The head refused a grown ring: back to the size before, not asked again.
  void grow_refused_st(PartitionSession& s, Clock::time_point now);

  // --- zero-copy publish (publisher_claim.cpp) ---
  // Reserves a frame of `length` payload bytes (after the attributes block
  // of `attrs`, encoded here) in `partition`'s ring: *buffer is where the
  // payload goes, *ticket names the claim.
  fabric::Errc claim_st(std::uint32_t partition, const PendingRecord& how, std::size_t length,
                        const chain::Attributes* attrs, std::span<std::byte>* buffer, std::uint64_t* ticket);
  // The claim becomes the partition's next record (closed either way).
  fabric::Errc commit_claim_st(std::uint32_t partition, std::uint64_t ticket, PublishCallback& cb);
  void abort_claim_st(std::uint32_t partition, std::uint64_t ticket) noexcept;
  [[nodiscard]] bool claim_open_st(std::uint32_t partition) const {
    return partition < sessions_.size() && sessions_[partition]->claim_ticket != 0;
  }
  std::uint32_t claims_open_ = 0;  // a channel alter's switch waits for none
  std::uint64_t next_ticket_ = 1;

  // --- a channel alter (publisher_remap.cpp) ---
  // A head refused records with remap: the barrier is up until every
  // partition's in-flight records are answered, and the sessions of the
  // partitions the alter adds are built (on builds_, meanwhile); then
  // switch_generation_st.
  void start_remap_st(const PartitionSession& s);
  [[nodiscard]] bool barrier_done_st() const;
  // Adopts the newest generation the heads named and queues the refused
  // records for re-sending in publish order by the new mapping. A connected
  // session switches in band (its head is told the new generation); any
  // other reconnects naming it in its hello.
  void switch_generation_st(Clock::time_point now);
  // Takes the added partitions' sessions once built (after the switch).
  void adopt_sessions_st(Clock::time_point now);
  // Whether a new record may go to `partition` now: ok, backpressure (the
  // barrier is up, its session is being built, or records the switch sends
  // again to it are still queued), or resource_exhausted (no ring for it).
  [[nodiscard]] fabric::Errc may_publish_st(std::uint32_t partition) const;
  // Stages queued re-sends as the sessions take them (in publish order per
  // partition; a partition that has no room holds back only its own).
  // Returns the records staged.
  int drain_resends_st();
  // The application's callback of the next record, resolved.
  void resolved_st(PartitionSession& s, std::uint64_t seq, chain::wire::Status st, std::uint64_t offset);

  // What the application was last told (PublisherOptions::on_event): the
  // route epoch and head link it saw, and whether a stall was reported.
  std::uint64_t seen_epoch = 0;
  std::uint64_t seen_link = 0;
  bool stall_reported = false;

  // --- reaching the head and the tail (publisher_connect.cpp) ---
  // Starts an attempt to connect to the head: the route first.
  void start_connect_st(PartitionSession& s, Clock::time_point now);
  // Moves an attempt on as far as the answers that came allow; starts one
  // when the retry is due (and `may_start`). Never waits.
  void advance_connect_st(PartitionSession& s, Clock::time_point now, bool may_start);
  // Takes the answer of the session's route lookup, if it came, and acts
  // on it (an attempt goes on; a stall check or a watch finds a new head).
  void take_lookup_st(PartitionSession& s, Clock::time_point now);
  // Re-reads the route for a stall check (acks stalled while connected).
  void start_stall_check_st(PartitionSession& s, Clock::time_point now);
  // The commit watch with the tail: starts, or advances, its attempt.
  void advance_watch_st(PartitionSession& s, Clock::time_point now);
  void drop_watch_st(PartitionSession& s);
  // The head link is gone (reported to the route source), or must be
  // redialled (a resync or a move): reconnect from the next poll.
  void lost_head_st(PartitionSession& s, const std::string& why);
  void go_down_st(PartitionSession& s, Clock::time_point now);

  RouteSource& routes_;
  std::string channel_;
  PublisherOptions opts_;
  std::shared_ptr<fabric::Provider> provider_;  // shared_provider(): the process's for this spec
  std::vector<std::unique_ptr<PartitionSession>> sessions_;
  std::uint32_t ring_bytes_ = 0;     // a partition's largest ring (PublisherOptions::ring_bytes)
  std::uint64_t ring_budget_ = 0;    // PublisherOptions::ring_budget_bytes
  std::uint64_t ring_used_ = 0;      // the rings' sum (ring_bytes_in_use())
  std::uint32_t active_in_gen_ = 0;  // partitions below partitions_ that have a ring
  std::uint32_t max_record_ = chain::kMaxRecordPayload;
  std::uint64_t producer_epoch_ = 0;
  std::uint32_t rr_ = 0;
  std::uint64_t in_flight_ = 0;
  // The channel generation keys are mapped by, and its partition count
  // (sessions_ may hold more: partitions a shrink removed stay idle).
  std::uint64_t generation_ = 0;
  std::uint32_t partitions_ = 0;
  std::uint64_t next_order_ = 0;
  bool remapping_ = false;  // the barrier: no new records until the switch
  // Refused records to send again after a switch, in publish order (one
  // allocation per switch, not per record); resend_next_ the first not
  // staged yet. New records wait until it is empty. They stay counted in
  // in_flight_ (flush() waits for them).
  struct Resend {
    PendingRecord how;
    std::uint32_t from = 0;          // the partition that refused it
    std::uint64_t timestamp_ns = 0;  // when it was published
    std::size_t at = 0;              // its payload in resend_bytes_
    std::uint32_t bytes = 0;
    std::uint32_t flags = 0;  // kFlagAttributes: its key and headers lead the payload bytes
    std::uint32_t to = 0;     // where it goes by the new mapping
    bool staged = false;      // sent again (or failed)
  };
  std::vector<Resend> resends_;
  std::vector<std::byte> resend_bytes_;  // the refused records' payloads, one after another
  std::size_t resend_next_ = 0;
  // Per partition of the current generation: re-sends not staged yet (new
  // records to it wait for them), and, during one drain, whether one of its
  // re-sends had to wait (the later ones do too).
  std::vector<std::uint32_t> waiting_;
  std::vector<std::uint8_t> blocked_;
  // The sessions of the partitions an alter adds, built on builds_ while
  // the barrier is up (allocating a ring and FIFOs takes milliseconds the
  // switch would otherwise wait for); the first is partition `from`.
  struct Built {
    std::uint32_t from = 0;
    std::vector<std::unique_ptr<PartitionSession>> sessions;
  };
  client_detail::Call<Built> building_;
  std::optional<Built> built_;
  std::uint32_t window_ = 0;
  bool events_ = false;  // create() is done: changes from here on are events
  // The polling thread: the first to call in after create() (which may run
  // on another thread and hands the publisher over unowned).
  fabric::ThreadOwner owner_;
  // Last: destroyed (joined) first, while the provider, the sessions and
  // the route source their calls use are still there; the dial worker's
  // threads are left to end their connects, which hold the provider.
  client_detail::ClientWorker lookups_{"catena-pub-rt"};  // RouteSource calls
  client_detail::ClientWorker dials_{
      "catena-pub-dial", client_detail::kDialThreads,
      client_detail::ClientWorker::Ending::leave_running};  // Provider::connect
  client_detail::ClientWorker builds_{"catena-pub-mem"};    // sessions an alter adds

 private:
  void start_lookup_st(PartitionSession& s, PartitionSession::Lookup what);
  // Events (PublisherOptions::on_event): emit_st calls the handler;
  // observe_st compares a session with what was last told (once per poll).
  void emit_st(ClientEvent::Kind kind, const PartitionSession& s, std::string message);
  void observe_st(PartitionSession& s, Clock::time_point now);
  // The head's PublishHeld: an event when the reason is new.
  void held_st(PartitionSession& s, const chain::wire::PublishHeld& h, Clock::time_point now);
  void report_st(const std::string& node_id, const Route& route, const std::string& reason);
  void on_connect_route_st(PartitionSession& s, client::Result<Route> route, Clock::time_point now);
  void dial_head_st(PartitionSession& s, ReplicaAddress head, std::uint64_t epoch);
  // A `moved` welcome: takes its hint, if new, and says when to try again.
  void on_moved_welcome_st(PartitionSession& s, const chain::wire::PublisherWelcome& w,
                           Clock::time_point now);
  void on_dialed_st(PartitionSession& s, chain::Link::Dialed<chain::wire::PublisherWelcome> d,
                    Clock::time_point now);
  bool apply_route_st(PartitionSession& s, const client::Result<Route>& r);
  void start_watch_st(PartitionSession& s, Clock::time_point now, bool refresh_route);
  void dial_watch_st(PartitionSession& s, Clock::time_point now);
};

}  // namespace catena
