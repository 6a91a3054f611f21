// Replica: one node's part in the chain of one partition, and the data-plane
// engine that runs it.
//
//  - head: consumes publishers' staging rings (frames they wrote with
//    one-sided writes), checks idempotence, appends to its PartitionLog, and
//    acknowledges each publisher once the tail's commit covers its records;
//  - every replica that has a successor forwards new byte ranges of each
//    segment slot to the same place in its successor's slot (RDMA WRITE, then
//    WRITE WITH IMMEDIATE naming slot and end), oldest segment first, so a
//    new or lagging successor is caught up by the same code that streams
//    live data;
//  - a joining replica sits after the tail (position >= chain_length): the
//    tail forwards to it like to any successor, but it is not part of the
//    chain yet; it never commits, so it neither serves records nor
//    acknowledges anything. It writes what it holds (its end offset, tagged
//    with the epoch) into the tail's held word. While the tail owes it more
//    than join_sync_backlog_bytes() the tail commits what it holds whatever
//    the joining replica has. Below that the tail **syncs** it, for the rest
//    of the epoch: its commit advances only to what both hold, so after one
//    forwarding pass (the commit waits for it) every committed record is on
//    the joining replica too (ReplicaStats::successor_synced). Only then may
//    the controller promote it to tail: a chain never gains a member that
//    lacks an acknowledged record. Promoted, it commits what it holds and
//    its commit travels up through the old tail, now a middle, over the link
//    that already exists;
//  - every replica but the head validates what its predecessor wrote before
//    it forwards, commits or serves it;
//  - the tail's commit offset travels back up: each replica writes it into
//    its predecessor's commit word (a one-sided write of {commit, ~commit});
//  - the tail also acknowledges records straight to their publishers when
//    they opened a commit watch with it (wire::CommitWatchHello): whatever the
//    tail holds is committed, so the ack needs no trip back up the chain;
//  - any replica serves subscribers committed records, pushed into their
//    rings straight from segment memory.
//
// Epochs: a Replica lives at one epoch at a time; reconfigure() moves it to a
// newer one and drops links to nodes that are no longer its neighbours
// (their connection is moved to error: transport-level fencing). Hellos from
// an older epoch are refused with stale_epoch.
//
// Threading: everything here runs on the node's data-plane thread (_st),
// except create(), which may run anywhere before handing the object over.
// In builds with CATENA_THREAD_CHECKS the entry points check it: the first
// thread to call one owns the replica, and any other aborts.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catena/chain/commit_watch.hpp>
#include <catena/chain/delivery.hpp>
#include <catena/chain/kept_replica.hpp>
#include <catena/chain/link.hpp>
#include <catena/chain/partition_log.hpp>
#include <catena/chain/producer_state.hpp>
#include <catena/chain/publish.hpp>
#include <catena/chain/replica_counters.hpp>
#include <catena/chain/wire.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/fabric.hpp>
#include <catena/fabric/thread_owner.hpp>

namespace catena::chain {

// What one broker lets its clients hold, so that no client (buggy or
// hostile) can exhaust it. Sessions beyond a limit are refused at hello with
// resource_exhausted.
struct SessionLimits {
  std::uint32_t max_publishers = 256;   // per partition replica
  std::uint32_t max_subscribers = 256;  // per partition replica (each needs a scratch slot)
  std::uint32_t max_watchers = 256;     // per partition replica
  std::uint32_t max_producers = 1024;   // idempotence state per partition (64 KiB each)
  std::uint64_t producer_expiry_ns = 15ull * 60 * 1'000'000'000;  // forget producers idle this long
};

struct ReplicaConfig {
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;
  std::string node_id;
  // Incarnations (node epochs) of this node and of its neighbours, as the
  // route names them. Links are accepted only between these incarnations.
  // 0: not checked (chains configured by hand, without a controller).
  std::uint64_t node_epoch = 0;
  std::uint64_t predecessor_node_epoch = 0;
  std::uint64_t successor_node_epoch = 0;
  // The route epoch's secret (ChainAssignment.link_secret): a predecessor's
  // hello must carry it, and this replica's hello carries it to the
  // successor. All zero: not checked (chains configured by hand).
  std::array<std::uint8_t, wire::kLinkSecretBytes> link_secret{};
  // The partition's access secret (ChainAssignment.access_secret): clients'
  // hellos must carry it. All zero: not checked (chains configured by hand).
  wire::AccessSecret access_secret{};
  std::uint32_t position = 0;      // 0 = head; >= chain_length: joining after the tail
  std::uint32_t chain_length = 1;  // replicas in the chain proper; position == chain_length-1: tail
  std::string predecessor_node;    // empty for the head
  std::string successor_node;      // empty for the last replica (the tail, unless one is joining)
  std::string successor_addr;      // fabric address of the successor
  std::string head_addr;           // for redirecting publishers
  LogConfig log;
  std::uint32_t slot_count = 8;
  std::uint64_t start_offset = 0;
  SessionLimits limits;
  // A successor link that completes none of the writes in flight on it for
  // this long is dropped and reported (LinkFault): a peer that stopped
  // answering on the data plane, where nothing may ever reset the
  // connection (TCP into a cut, RNR retries without end). Well above the
  // transport's own loss recovery (the verbs provider's RC queue pairs
  // retransmit after 268 ms and fail after 7 attempts), so a lossy but live
  // link is never taken for a dead one, and a host that pauses for seconds
  // (emulated VMs do) is not either.
  std::uint64_t link_stall_ns = 6'000'000'000;
  SessionBudget* budget = nullptr;  // the broker's; nullptr: this replica's own, with the default limit
  // The node's segment memory (the broker's; nullptr: this replica's own,
  // without a limit). A slot takes segment_bytes from it when a segment
  // opens there (at the head) or its predecessor is granted it, and gives
  // them back when the segment expired past its grace (partition_log.hpp).
  // A kept replica (keep_name) holds and is charged every slot from the start,
  // of segment_bytes each (log.min_segment_bytes does not apply to it).
  SegmentBudget* segment_budget = nullptr;
  // Where traced records' stage latencies go (the node's; null: nowhere),
  // at this replica's position.
  StageLatency* stage_latency = nullptr;
  // The tenant whose namespace holds the channel (ChainAssignment.tenant;
  // empty: none). The broker points the two below at that tenant's.
  std::string tenant;
  // The partition's tenant on this broker (the broker's, one per tenant;
  // nullptr: none): its share of the publisher ring memory and its publish
  // rate (RateBudget), set when the replica is created.
  SessionBudget* tenant_budget = nullptr;
  RateBudget* tenant_rate = nullptr;
  SessionSeats* tenant_seats = nullptr;  // its client sessions, every partition's, on this broker
  // Non-empty: the slots are kept memory under this name (kept_replica.hpp),
  // and what a crashed process left there is recovered (PartitionLog::
  // recover_st) if it is this partition's, of this lineage, with this
  // geometry.
  std::string keep_name;
  // The partition's identity in its cluster (ChainAssignment.lineage): kept
  // memory written under another lineage (another cluster that had a
  // partition of the same name) is never recovered. All zero: not checked.
  std::array<std::uint8_t, wire::kLinkSecretBytes> lineage{};

  [[nodiscard]] bool is_head() const { return position == 0; }
  [[nodiscard]] bool is_tail() const { return position + 1 == chain_length; }
  [[nodiscard]] bool is_joining() const { return position >= chain_length; }
};

// Checks a configuration against chain/limits.hpp (names that fit the wire,
// slot count, segment size): invalid_argument naming the field otherwise.
// The controller's validation guarantees the same; this catches a replica
// configured by hand, which would otherwise truncate a name on the wire.
[[nodiscard]] fabric::Result<void> check_replica_config(const ReplicaConfig& cfg);

struct ReplicaStats {
  std::uint64_t end_offset = 0;
  std::uint64_t commit_offset = 0;
  std::uint64_t start_offset = 0;
  std::uint64_t bytes = 0;
  std::uint32_t segments = 0;
  std::uint32_t publishers = 0;
  std::uint64_t publisher_sessions_opened = 0;  // publisher hellos welcomed, ever (head)
  std::uint32_t subscribers = 0;
  std::uint32_t watchers = 0;
  std::uint64_t corrupt_frames = 0;  // refused from publishers or predecessor
  bool successor_connected = false;
  bool predecessor_connected = false;
  // Bytes this replica holds that its successor does not have yet: not yet
  // posted, or posted and not yet completed. -1 without a successor link.
  std::int64_t successor_backlog_bytes = -1;
  // A tail only: it syncs its joining successor and the successor holds
  // every record this tail committed (it may be promoted).
  bool successor_synced = false;
  // Bytes written to successors since this replica was created (the copy a
  // joining successor costs shows here, at its predecessor).
  std::uint64_t forwarded_bytes = 0;
  // What create() found in kept memory and kept (ReplicaConfig::keep_name).
  std::uint64_t recovered_records = 0;
  std::uint64_t recovered_bytes = 0;
};

// What a sealed head holds (partition handoff): every record it stored lies
// below end_offset, and the chain has committed up to commit_offset; once
// they are equal the whole range is committed and the next chain may start
// at end_offset with this producer state.
struct SealState {
  std::uint64_t end_offset = 0;
  std::uint64_t commit_offset = 0;
  std::vector<ProducerSnapshot> producers;
};

// A channel alter's marker at a head: where it lies and how far the chain
// has committed (the marker is committed once commit_offset > offset).
struct MarkerState {
  AppendStatus status = AppendStatus::ok;  // log_full: try again
  std::uint64_t offset = 0;
  std::uint64_t commit_offset = 0;
};

// A neighbour this replica lost or could not use, and why: the broker turns
// it into a failure report to the controller.
struct LinkFault {
  std::string node;
  std::string reason;
};

class Replica {
 public:
  static fabric::Result<std::unique_ptr<Replica>> create(fabric::Provider& provider, const ReplicaConfig& cfg,
                                                         const Clock& clock);
  ~Replica();

  // Moves to a newer epoch. Returns false (and changes nothing) if cfg.epoch
  // is not newer than the current one. Ends a suspension.
  bool reconfigure(const ReplicaConfig& cfg);
  // The channel's retention altered (at any epoch): PartitionLog::set_ttl_ns.
  void set_ttl_st(std::uint64_t ttl_ns);

  // --- acting on the epoch -----------------------------------------------------
  // A replica acknowledges publishers (head), commit watches (tail) and
  // serves subscribers only while it may act on its epoch: while its node's
  // lease from the controller is valid (the broker sets it once per duty
  // cycle pass, from one atomic deadline) and it is not suspended. It keeps
  // replicating and committing either way: a lapsed lease stalls acks, it
  // never fails them.
  void set_lease_valid_st(bool valid) {
    CATENA_ST_CHECK(owner_);
    lease_valid_ = valid;
  }
  // Its node was fenced: hold the data, act on nothing, until a newer epoch
  // (reconfigure) or a fence (the broker drops it) says what it is.
  void suspend_st() {
    CATENA_ST_CHECK(owner_);
    suspended_ = true;
  }
  [[nodiscard]] bool suspended() const { return suspended_; }

  // --- partition handoff (tail offset) ---------------------------------------
  // Head only: takes no more appends at this epoch (records in publishers'
  // rings are answered `moved`, new publishers too), keeps forwarding and
  // committing what it holds, and says where it ends. Idempotent; a newer
  // epoch (reconfigure: the move was abandoned) lifts the seal.
  SealState seal_st();
  [[nodiscard]] bool sealed() const { return sealed_; }
  // The partition moved on at range_end: this replica keeps [start,
  // range_end) read-only for subscribers until it expires, drops its chain
  // links, publishers and watches, and tells a subscriber that reaches
  // range_end `moved`. Its epoch stays the one its range was written at.
  void retire_st(std::uint64_t range_end);
  // Where the partition's next range is served (the route epoch to name
  // there and its head's fabric address), told with the route that sealed
  // or retired this replica: `moved` answers carry it (wire::NextChainHint),
  // so clients go there without asking the controller. Keeps the newest
  // epoch it was told; an address longer than the wire's field is ignored.
  void set_next_chain_st(std::uint64_t epoch, std::string head_addr);
  // The partition's access secret now (ChainAssignment.access_secret, at
  // any epoch; a retired range too). When it changes (the tenant's token
  // was rotated) every publisher, subscriber and commit watch session is
  // closed: each must say hello again, with the new secret.
  void set_access_secret_st(const wire::AccessSecret& secret);
  static constexpr std::uint64_t kOpenRange = ~0ull;
  [[nodiscard]] std::uint64_t range_end() const { return range_end_; }
  // --- channel alter -----------------------------------------------------------
  // Head only: appends a marker opening channel generation m.generation, unless
  // this replica already holds one for it or a newer one (appended here, or
  // validated from a predecessor before a repair made it the head): then
  // that one's offset. Publishers are not refused yet (see README).
  MarkerState append_marker_st(const MarkerSpec& m);
  // Taken in by a new head before it is reachable (ChainAssignment.producers).
  void merge_producers_st(const std::vector<ProducerSnapshot>& producers);
  [[nodiscard]] bool may_act() const { return lease_valid_ && !suspended_; }
  [[nodiscard]] const ReplicaConfig& config() const { return cfg_; }
  [[nodiscard]] std::uint64_t epoch() const { return cfg_.epoch; }

  // The data-plane duty cycle: returns how much work it did.
  int do_work();
  // Slow-path housekeeping (connection events, TTL): call every few ms.
  void tick();

  // --- chain links -----------------------------------------------------------
  // True when this replica has a successor (a joining one included) to
  // connect to and no link to it.
  [[nodiscard]] bool wants_successor() const;
  // The hello to dial the successor with; its commit_word is filled in by
  // the dialler once the connection exists (Endpoint::expose of
  // commit_word_region() on it: the key is that link's alone).
  [[nodiscard]] wire::ReplicaHello successor_hello() const;
  // Shared so that a dial in flight keeps it alive after a reconfiguration.
  [[nodiscard]] std::shared_ptr<const fabric::MemoryRegion> commit_word_region() const {
    return commit_word_;
  }
  // The successor's answer: installs the link and starts (re)forwarding from
  // what the successor already holds. False if the welcome does not fit.
  bool attach_successor(std::unique_ptr<Link> link, const wire::ReplicaWelcome& welcome);
  // Successor links attached again at an epoch that had one (rebuilt in
  // place: partition-level recovery), since this replica was created.
  [[nodiscard]] std::uint64_t successor_rebuilds() const { return successor_rebuilds_; }
  // A predecessor said hello: answers and, if accepted, installs the link.
  void attach_predecessor(std::unique_ptr<Link> link, const wire::ReplicaHello& hello);

  // --- client sessions -------------------------------------------------------
  void attach_publisher(std::unique_ptr<Link> link, const wire::PublisherHello& hello);
  void attach_subscriber(std::unique_ptr<Link> link, const wire::SubscriberHello& hello);
  void attach_watcher(std::unique_ptr<Link> link, const wire::CommitWatchHello& hello);

  [[nodiscard]] ReplicaStats stats() const;
  // Any thread: the counters this replica's data-plane thread keeps
  // (replica_counters.hpp); shared, so a reader may keep them past the
  // replica's end.
  [[nodiscard]] std::shared_ptr<const ReplicaCounters> counters() const { return counters_; }
  // Neighbours this replica found unreachable since the last call (for
  // failure reports).
  std::vector<LinkFault> take_faults();
  [[nodiscard]] const PartitionLog& log() const { return *log_; }
  // What create() recovered from kept memory (end 0: nothing).
  [[nodiscard]] const PartitionLog::Recovered& recovered() const { return recovered_; }
  // Bytes of its segment slots that hold memory and its kept meta page: what
  // the provider zeroes once the replica is gone (Provider::allocate's
  // regions when they are destroyed, kept ones when discard_kept drops
  // their names).
  [[nodiscard]] std::uint64_t memory_bytes() const;

 private:
  Replica(fabric::Provider& provider, const ReplicaConfig& cfg, const Clock& clock);

  // The log's SlotMemory: slots' memory from and back to the segment budget.
  struct SlotMemoryOf final : SlotMemory {
    explicit SlotMemoryOf(Replica& r) : replica(r) {}
    std::span<std::byte> acquire(std::uint32_t slot, std::uint32_t bytes, bool* zeroed) override {
      return replica.acquire_slot_st(slot, bytes, zeroed);
    }
    bool release(std::uint32_t slot, std::uint64_t generation) override {
      return replica.release_slot_st(slot, generation);
    }
    std::uint64_t linger_ns(std::uint64_t now_ns) override {
      return now_ns < replica.segments_st().short_until_ns ? 0 : replica.linger_ns_;
    }
    Replica& replica;
  };
  std::span<std::byte> acquire_slot_st(std::uint32_t slot, std::uint32_t bytes, bool* zeroed);
  bool release_slot_st(std::uint32_t slot, std::uint64_t generation);
  SegmentBudget& segments_st() {
    return cfg_.segment_budget != nullptr ? *cfg_.segment_budget : own_segments_;
  }
  // Successor side of the slot grant (wire.hpp): answers what the
  // predecessor asked (grant_asked_).
  int answer_grants_st();
  // Predecessor side: asks the successor for slot `slot`'s generation.
  void ask_slot_st(std::uint32_t slot, std::uint64_t generation);

  int pump_predecessor_st();
  int forward_st();
  int pump_successor_st();
  int propagate_commit_st();
  void on_commit_advanced_st();
  std::uint64_t read_commit_word_st() const;
  // What the joining successor says it holds at this epoch (0 if it said
  // nothing yet, or at another epoch).
  std::uint64_t read_held_word_st() const;
  // A tail's commit: all it holds, or, syncing a joining successor, what
  // both hold (never backwards).
  void commit_as_tail_st();
  // Bytes this replica holds that its successor does not have yet.
  std::uint64_t successor_backlog_st() const;
  // A joining replica: writes its end offset into the tail's held word.
  int report_held_st();
  SessionBudget& budget_st() { return cfg_.budget != nullptr ? *cfg_.budget : own_budget_; }

  fabric::Provider& provider_;
  ReplicaConfig cfg_;
  const Clock& clock_;
  std::vector<std::unique_ptr<fabric::MemoryRegion>> slot_mrs_;
  // Kept memory: the meta page (kept_replica.hpp) and the commit it holds.
  std::unique_ptr<fabric::MemoryRegion> kept_meta_mr_;
  KeptReplicaMeta* kept_meta_ = nullptr;
  std::uint64_t kept_commit_ = 0;
  PartitionLog::Recovered recovered_{};
  std::uint64_t forwarded_bytes_ = 0;
  std::shared_ptr<fabric::MemoryRegion> commit_word_;  // written by the successor
  // The commit word region (64 bytes, written by the successor only): words
  // 0-1 {commit, ~commit} from a successor in the chain, words 2-4 {held end,
  // epoch, held_check} from a joining one.
  static constexpr std::size_t kHeldWord = 2;
  static constexpr std::uint64_t held_check(std::uint64_t held, std::uint64_t epoch) {
    return ~held ^ (epoch * 0x9E3779B97F4A7C15ull);
  }
  ScratchRing scratch_;  // sources of commit words up the chain and of pads into subscribers' rings
  std::unique_ptr<PartitionLog> log_;
  ProducerState producers_;

  // Successor side.
  std::unique_ptr<Link> succ_;
  std::array<fabric::RemoteRegion, wire::kMaxSlots> succ_slots_{};
  std::array<std::uint64_t, wire::kMaxSlots> fwd_gen_{};
  std::array<std::uint32_t, wire::kMaxSlots> fwd_end_{};
  // Slot grants from the successor: the generation each slot's key in
  // succ_slots_ is good for, the one asked for and not answered yet, and
  // when to ask again after a refusal (the successor's budget was spent).
  std::array<std::uint64_t, wire::kMaxSlots> succ_granted_{};
  std::array<std::uint64_t, wire::kMaxSlots> succ_asked_{};
  std::uint64_t ask_again_ns_ = 0;
  std::uint64_t fwd_in_flight_ = 0;  // bytes of data writes posted and not yet completed
  std::uint64_t succ_progress_ns_ =
      0;  // tick clock when the link last completed a write, or had none in flight
  // Predecessor side.
  std::unique_ptr<Link> pred_;
  fabric::RemoteRegion pred_commit_word_{};
  std::uint64_t commit_sent_up_ = 0;
  std::uint64_t held_sent_up_ = 0;  // a joining replica: the end it last wrote into the tail's held word
  // Slot grants to the predecessor: the newest generation granted in each
  // slot (its memory stays until that one expired), and what it asked for
  // that is not answered yet (0: nothing).
  std::array<std::uint64_t, wire::kMaxSlots> granted_{};
  std::array<std::uint64_t, wire::kMaxSlots> grant_asked_{};
  std::array<std::uint32_t, wire::kMaxSlots> grant_bytes_{};  // the size asked with it
  bool syncing_ = false;  // a tail counts its joining successor in its commit (this epoch)

  PublishServer publishes_;    // publishers appending through this head (publish.hpp)
  DeliveryServer deliveries_;  // subscribers reading from this replica (delivery.hpp)
  CommitWatchServer watches_;  // the tail's commit watches (commit_watch.hpp)
  std::vector<LinkFault> faults_;
  std::uint64_t corrupt_frames_ = 0;
  const std::shared_ptr<ReplicaCounters> counters_ = std::make_shared<ReplicaCounters>();
  std::uint64_t successor_epoch_ = 0;  // the route epoch of the last successor link attached (0: none yet)
  std::uint64_t successor_rebuilds_ = 0;
  SessionBudget own_budget_;
  SegmentBudget own_segments_;
  SlotMemoryOf slot_memory_{*this};
  std::uint64_t linger_ns_ = 0;               // SlotMemory::linger_ns: the grace, at least 1 s
  std::uint64_t segment_bytes_held_ = 0;      // charged to segments_st()
  std::uint64_t tick_ns_ = 0;                 // the clock at the last tick(): producer state's idle clock
  std::uint64_t next_expiry_ns_ = 0;          // when tick() next forgets idle producers
  std::uint64_t next_session_events_ns_ = 0;  // when tick() next polls client connections' events
  bool lease_valid_ = true;                   // no lease until the broker is told one
  bool suspended_ = false;
  bool sealed_ = false;
  std::uint64_t range_end_ = kOpenRange;
  std::uint64_t next_epoch_ = 0;  // set_next_chain_st
  std::string next_head_;
  fabric::ThreadOwner owner_;  // the data-plane thread, once it first calls in
};

}  // namespace catena::chain
