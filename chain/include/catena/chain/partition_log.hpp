// PartitionLog: one replica's copy of a partition, as a ring of segment slots
// in pre-registered memory. The same slot index holds the same segment on
// every replica of the chain, so a predecessor forwards byte ranges of slot s
// to the same position of its successor's slot s.
//
// Slot layout: a 64-byte SegmentHeader at position 0, then record frames
// (record.hpp). A segment ends with a seal frame.
//
// Lifecycle of a slot: free -> open (head appends; replicas validate what the
// predecessor wrote) -> sealed (when full, or after `ttl` open) -> expired
// (`ttl` after sealing: no new reader may start there) -> free again `grace`
// later (lagging readers get `expired`), but only once every record in it is
// committed. The head opens a segment in the oldest slot that may go and
// whose memory fits, else in one without memory: a partition cycles through
// as many slots as it fills in a ttl plus grace, reusing their memory in
// place, and the others give theirs back (see Memory). Segments are
// therefore not in slot order: their generations and base offsets order
// them (a reader finds the next segment by its base offset, a predecessor
// forwards the oldest first). A record is kept at least `ttl`, and never
// dropped before the tail holds it. If no slot may go yet, the head refuses
// appends with log_full (back-pressure) instead of dropping data.
//
// Zeroing: nothing reads a slot past what was validated there: a reader
// stops at the commit offset, a predecessor forwards [its successor's end,
// its valid end), a replica checks what its predecessor says it wrote, and
// recovery (recover_st) accepts only consecutive offsets from the segment's
// base, each frame checked, below the commit offset. So stale bytes of an
// older segment past the new one's valid end are never taken for records:
// every frame they hold has an offset below the new segment's base (the old
// segment was committed before its slot could be reused), and every offset
// below the commit offset was written afresh in front of them. A replica
// has always relied on this (its predecessor may be writing the new
// segment's next bytes while it validates the first, so it cannot clear
// ahead of them); since 2026-12-06 the head does too, and no longer clears
// what it wrote in a slot before reusing it (a pass over every byte of a
// 64 MiB segment per reuse, 5.5-7.5% of the cycles of 64 KiB records).
// Memory whose past the log does not know is still cleared before a
// segment opens there: from the node's pool unless it comes zeroed
// (another partition's bytes), and every slot once a predecessor may have
// written there or an earlier process left it (recover_st, reset_st),
// except slots known to be zero (slots_are_zero_st(): fresh from
// Provider::allocate and never exposed to a predecessor), where clearing a
// new chain's first segment would touch every page of it at its first
// append, a pause of tens of ms for a 64 MiB segment.
//
// Memory: with a SlotMemory (set_slot_memory), a slot has memory only while
// it holds a segment. The head takes it when it opens a segment there
// (AppendStatus::no_memory when none can be had: back-pressure, as
// log_full); a replica's is taken before its predecessor writes there (the
// slot grant, wire.hpp). A sealed segment that expired, whose grace passed
// and that is committed gives its memory back at the next tick(); its slot
// keeps what the log knew of it (sealed, expired) until a segment opens
// there again, and reads there answer expired. Without a SlotMemory every
// slot has its memory from the start and keeps it (kept replicas).
//
// Threading: owned by the partition's data-plane thread (_st).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <catena/chain/record.hpp>
#include <catena/chain/stage_latency.hpp>
#include <catena/fabric/clock.hpp>

namespace catena::chain {

class ProducerState;

struct SegmentHeader {
  std::uint64_t magic;
  std::uint64_t base_offset;  // offset of the first record
  std::uint64_t generation;   // bumps on every reuse of any slot of this partition
  std::uint64_t epoch;        // chain epoch when the segment was opened
  std::uint32_t slot;
  std::uint32_t bytes;  // the segment's size (its slot's memory); 0: LogConfig::segment_bytes
  std::uint64_t reserved1[2];
  std::uint32_t reserved2;
  std::uint32_t header_crc;
};
static_assert(sizeof(SegmentHeader) == 64);
inline constexpr std::uint64_t kSegmentMagic = 0x4341544e41534547ull;  // "CATNASEG"

// no_memory: the next segment needs memory and the node's segment budget
// has none now (SlotMemory); back-pressure, as log_full.
enum class AppendStatus : std::uint8_t { ok, log_full, too_large, no_memory };

enum class ValidateStatus : std::uint8_t { ok, corrupt, out_of_order };

enum class SlotState : std::uint8_t { free, open, sealed };

struct SlotInfo {
  SlotState state = SlotState::free;
  std::uint64_t generation = 0;
  std::uint64_t base_offset = 0;
  std::uint64_t next_offset = 0;  // offset after the last valid record
  std::uint32_t valid_end = 0;    // bytes validated from position 0
  std::uint64_t opened_ns = 0;
  std::uint64_t sealed_ns = 0;
  std::uint32_t bytes = 0;  // the segment's size (its slot's memory may be larger: kept memory)
  bool expired = false;
};

// Where a reader is: a slot, the generation it expects there, a byte position.
struct Cursor {
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  std::uint32_t position = 0;
  std::uint64_t next_offset = 0;
  bool valid = false;
};

enum class ReadStatus : std::uint8_t { record, none, expired };

struct ReadResult {
  ReadStatus status = ReadStatus::none;
  const std::byte* frame = nullptr;  // the whole frame (header + padded payload)
  std::uint32_t frame_bytes = 0;
  RecordHeader header{};
};

struct LogConfig {
  // The largest segment; a record must fit one.
  std::uint32_t segment_bytes = 1u << 20;
  std::uint64_t ttl_ns = 60'000'000'000ull;
  std::uint64_t grace_ns = 5'000'000'000ull;
  // How long, at least, a segment that may go keeps its memory past its
  // grace for the partition to reuse in place (the replica takes the larger
  // of this and the grace; a partition that opens segments rarely keeps it
  // longer, PartitionLog::release_expired_st). Shorter, memory follows the
  // rate more closely, and a rate that swings takes and zeroes fresh
  // memory on every swing.
  std::uint64_t linger_ns = 1'000'000'000ull;
  // With a SlotMemory, the smallest segment a head opens (0: every segment
  // is segment_bytes). A head sizes each new segment by the rate the one
  // before filled at: twice what that rate brings in over a ttl (at least
  // twice the one before when it filled), in powers of two from here;
  // always enough for the record that opens it, never more than
  // segment_bytes. A partition's segments then hold about what it takes in
  // per ttl, so its memory follows its rate, not segment_bytes; a burst
  // reaches segment_bytes after one small segment.
  std::uint32_t min_segment_bytes = 0;
};

// Segment memory the replicas of one broker may hold (BrokerConfig::
// segment_memory_bytes), shared by all of them: a slot is charged from when
// it takes memory to when it gives it back. Data-plane thread only.
struct SegmentBudget {
  std::uint64_t limit_bytes = ~0ull;
  std::uint64_t used_bytes = 0;
  std::uint64_t released_bytes = 0;  // given back since the start (the provider zeroes them)
  std::uint64_t refusals = 0;        // segments refused for want of budget
  std::uint64_t short_until_ns = 0;  // after a refusal: segments give memory back without lingering
};

// Where a log gets memory for a slot that has none, and gives it back.
class SlotMemory {
 public:
  virtual ~SlotMemory() = default;
  // `bytes` of memory for `slot`, or an empty span when none can be had
  // now. *zeroed: it holds only zeros.
  virtual std::span<std::byte> acquire(std::uint32_t slot, std::uint32_t bytes, bool* zeroed) = 0;
  // The segment `generation` in `slot` expired, its grace passed and it is
  // committed: its memory may go. Returns whether it went (it stays while
  // a predecessor was granted a newer generation there).
  virtual bool release(std::uint32_t slot, std::uint64_t generation) = 0;
  // How long past its grace a segment keeps its memory: a busy partition
  // reuses it in place (no new registration, no page faults); an idle one
  // gives it back. 0 while memory is short (a segment was refused lately).
  virtual std::uint64_t linger_ns(std::uint64_t now_ns) = 0;
};

class PartitionLog {
 public:
  // `slots`: one per slot, each segment_bytes of registered memory or empty
  // (none yet: a SlotMemory gives it).
  PartitionLog(std::vector<std::span<std::byte>> slots, LogConfig cfg, const Clock& clock);
  // Where slots without memory get it (see the top of this file).
  void set_slot_memory(SlotMemory* memory) noexcept { memory_ = memory; }
  // Gives slot `s` `bytes` of memory (0: segment_bytes) if it has none, or
  // memory of another size, which goes, with what the slot held (it is
  // free after this: a predecessor is about to write a newer segment
  // there). Without a SlotMemory, memory at least that large will do.
  // False when none can be had, or when `s` is the open segment.
  bool ensure_memory_st(std::uint32_t s, std::uint32_t bytes = 0);
  [[nodiscard]] bool has_memory(std::uint32_t s) const { return !slots_[s].empty(); }

  // --- head side -----------------------------------------------------------
  // Appends a record with the next offset. `h` carries producer fields and the
  // payload crc may be left 0 (computed). Sets *offset. Seals and rolls as needed.
  AppendStatus append(const RecordHeader& h, std::span<const std::byte> payload, std::uint64_t* offset);
  // Copies a frame a publisher built into the open segment, past its last
  // record, without appending it. A publisher can rewrite its ring at any
  // moment, so the head checks this copy, never the ring. Returns the copy
  // (valid until the next stage or append), or nullptr with *status
  // log_full or too_large. Seals and rolls as needed.
  std::byte* stage_frame(const std::byte* frame, std::uint32_t frame_bytes, AppendStatus* status);
  // Appends the frame stage_frame() just copied, stamping the next offset.
  std::uint64_t append_staged(std::uint32_t frame_bytes);
  // Appends a marker record (kFlagMarker, its payload the spec's counts)
  // opening channel generation m.generation; marker() says where.
  AppendStatus append_marker(const MarkerSpec& m, std::uint64_t* offset);

  // --- replica side --------------------------------------------------------
  // The predecessor says slot `slot` now holds `end` valid bytes. Validates the
  // new frames (checksums, consecutive offsets) and updates state. A newer
  // segment that starts exactly where the open one's records end seals the
  // open one here (its seal may never come: the predecessor reuses a
  // committed slot once its retention passed, also while a link is down).
  ValidateStatus on_remote_data(std::uint32_t slot, std::uint32_t end);

  // --- recovery (a restarted process's kept slots) ---------------------------
  // What recover_st() kept.
  struct Recovered {
    std::uint64_t start = 0;  // first offset kept
    std::uint64_t end = 0;    // first offset not kept (0: nothing kept)
    std::uint64_t records = 0;
    std::uint64_t bytes = 0;
    std::uint32_t segments = 0;
  };
  // Rebuilds the log from what its slots hold (the memory of a process that
  // ended), before anything else uses it: the newest run of intact segments
  // that continue one another, each record checked (checksum, consecutive
  // offsets), and nothing at or past `commit_offset`, what this replica knew
  // committed: a record beyond it may never have been, and a new head may
  // have stored another one at its offset. Markers and producers are rebuilt
  // from what is kept. Until the replica joins a chain again
  // (clear_recovered), a predecessor that does not continue what was kept
  // replaces it (on_remote_data starts over instead of refusing).
  Recovered recover_st(std::uint64_t commit_offset);
  [[nodiscard]] bool recovered() const noexcept { return recovered_; }
  void clear_recovered() noexcept { recovered_ = false; }

  // --- both ----------------------------------------------------------------
  // Seals the open segment if it has been open for ttl; expires and frees
  // segments by age. Returns true if anything changed. Call from the idle loop.
  bool tick();
  // Head only: seals the open segment once it has been open for ttl.
  bool roll_if_aged();
  // A new retention (the channel's ttl altered): from the next tick() every
  // segment not yet expired expires by it, those sealed before included
  // (counted from when each was sealed); one already expired stays expired.
  // As with any expiry, no reader starts in an expired segment, and one
  // already in it may finish it: its memory is reused `grace` later at the
  // earliest (then the reader gets `expired`).
  void set_ttl_ns(std::uint64_t ttl_ns) noexcept { cfg_.ttl_ns = ttl_ns; }
  // Seals the open segment now (handoff, shutdown). No-op if empty/none.
  void seal_open();

  // The newest marker this replica appended or validated: its generation
  // (0: none) and offset. A replica promoted to head answers a repeated
  // marker request with it.
  // The newest marker this log holds (appended or replicated).
  struct Marker {
    std::uint64_t generation = 0;
    std::uint64_t offset = 0;
    std::uint32_t partitions = 0;  // the generation's partition count (0: no marker)
  };
  [[nodiscard]] Marker marker() const noexcept { return marker_; }

  // First offset not yet written (head) / not yet validated (replica).
  [[nodiscard]] std::uint64_t end_offset() const noexcept { return end_offset_; }
  // Oldest offset still readable.
  [[nodiscard]] std::uint64_t start_offset() const noexcept;
  [[nodiscard]] std::uint64_t commit_offset() const noexcept { return commit_offset_; }
  void set_commit_offset(std::uint64_t c) noexcept {
    if (c > commit_offset_) commit_offset_ = c <= end_offset_ ? c : end_offset_;
  }
  // Where a brand-new partition starts (a handoff starts a chain mid-stream).
  void set_start(std::uint64_t base_offset) noexcept;
  // Chain epoch stamped into segments this replica opens as head.
  void set_epoch(std::uint64_t epoch) noexcept { epoch_ = epoch; }

  // Reader positioned at `offset`; invalid cursor if it is not retained.
  [[nodiscard]] Cursor seek(std::uint64_t offset) const;
  // Next committed record at the cursor, advancing it. Only a frame within
  // what was validated and at the cursor's next offset is a record: bytes
  // written over it since (a predecessor can) make it none.
  ReadResult read(Cursor& c) const;

  [[nodiscard]] std::uint32_t slot_count() const noexcept {
    return static_cast<std::uint32_t>(slots_.size());
  }
  [[nodiscard]] const SlotInfo& slot_info(std::uint32_t s) const { return info_[s]; }
  [[nodiscard]] std::span<std::byte> slot_memory(std::uint32_t s) const { return slots_[s]; }
  [[nodiscard]] int open_slot() const noexcept { return open_; }
  // The slot after the one the last segment opened in, where the search for
  // the next segment's slot starts (pick_slot_st); not the oldest segment's.
  [[nodiscard]] std::uint32_t next_slot() const noexcept { return next_slot_; }
  // Replicas rebuild idempotent-producer state from the records they
  // validate, so a replica promoted to head knows every stored sequence.
  void track_producers(ProducerState* ps) noexcept { producers_ = ps; }
  // Traced records (kFlagTrace) add their age to `stages` at `position` as
  // they are appended here (head) or arrive from the predecessor.
  void trace_stages(StageLatency* stages, std::uint32_t position) noexcept {
    stages_ = stages;
    stage_position_ = position;
  }
  // Slots in segment order, oldest first (those not free).
  [[nodiscard]] std::vector<std::uint32_t> slots_in_order() const;
  [[nodiscard]] const LogConfig& config() const noexcept { return cfg_; }
  // Bytes of the segments the log holds in memory.
  [[nodiscard]] std::uint64_t bytes_used() const noexcept;
  // Segments the log holds in memory.
  [[nodiscard]] std::uint32_t segments_held() const noexcept;
  // A full log (append: log_full): how long until its oldest sealed segment
  // may be reused (ttl + grace after it was sealed); 0 when that time has
  // passed and it waits for its records to commit, or no segment is sealed.
  [[nodiscard]] std::uint64_t oldest_free_in_ns_st() const;
  // Every slot's memory is zero (fresh from Provider::allocate): the first
  // segment opened in each needs no clearing.
  void slots_are_zero_st() { std::fill(foreign_.begin(), foreign_.end(), 0); }
  // A predecessor may write into every slot from now on: clear before use.
  void slots_written_remotely_st() { std::fill(foreign_.begin(), foreign_.end(), 1); }

 private:
  AppendStatus open_next_st(std::uint64_t epoch, std::uint32_t need);
  // The slot the next segment (of `bytes`) opens in, or -1 (log full).
  int pick_slot_st(std::uint32_t bytes) const;
  // Slot s holds memory larger than a segment of `bytes`, up to twice that:
  // reused warm, the segment takes the slot's size (open_next_st).
  [[nodiscard]] bool warm_and_larger_st(std::uint32_t s, std::uint32_t bytes) const {
    return memory_ != nullptr && slots_[s].size() > bytes && slots_[s].size() <= 2ull * bytes;
  }
  // A segment opened at `now`: how often this partition opens one.
  void note_open_st(std::uint64_t now);
  // The size of the next segment for a frame of `need` bytes.
  std::uint32_t next_size_st(std::uint32_t need) const;
  // Seals the open segment, and sizes the next one by how it ended.
  void seal_full_st(std::uint32_t s);
  // The next segment's size from how the one in `s` filled (full or not):
  // twice what it would take in over a ttl at the rate it filled.
  void size_next_st(std::uint32_t s, bool full);
  // Gives back the memory of segments past their grace (SlotMemory).
  bool release_expired_st(std::uint64_t now);
  // Checks the frames of `slot` from its valid end up to `end`, stopping
  // before the first record at or past stop_offset; seal_at_end: a seal
  // must be the last frame (what a predecessor wrote), else it ends the scan.
  ValidateStatus scan_frames_st(std::uint32_t slot, std::uint32_t end, std::uint64_t stop_offset,
                                bool seal_at_end);
  // Drops everything (a recovered prefix the predecessor does not continue).
  void reset_st();
  // Adds a traced record's age to stages_.
  void trace_st(const RecordHeader& h);
  void seal_st(std::uint32_t s);
  std::uint32_t room_st(std::uint32_t s) const;
  AppendStatus append_frame_st(const RecordHeader& r, std::span<const std::byte> payload,
                               std::uint64_t* offset);

  std::vector<std::span<std::byte>> slots_;
  std::vector<SlotInfo> info_;
  // By slot: its memory may hold bytes this log did not write (1), cleared
  // before a segment opens there; 0: zeros, or only what this log wrote.
  std::vector<std::uint8_t> foreign_;
  LogConfig cfg_;
  const Clock& clock_;
  int open_ = -1;
  std::uint32_t next_slot_ = 0;
  std::uint64_t generation_ = 0;
  std::uint64_t last_open_ns_ = 0;      // when the last segment opened
  std::uint64_t open_interval_ns_ = 0;  // between the last two openings
  std::uint64_t end_offset_ = 0;
  std::uint64_t commit_offset_ = 0;
  std::uint64_t epoch_ = 0;
  ProducerState* producers_ = nullptr;
  StageLatency* stages_ = nullptr;
  std::uint32_t stage_position_ = 0;
  SlotMemory* memory_ = nullptr;
  std::uint32_t next_bytes_ = 0;  // the next segment's size before need (min_segment_bytes and up)
  Marker marker_;
  bool recovered_ = false;
};

}  // namespace catena::chain
