// Idempotent-producer state of one partition: per producer id its epoch, the
// last sequence number stored and the offsets of a window of recent
// sequences, so a retried publish is acknowledged with its original offset
// instead of being stored twice. Merged into a new head on handoff.
//
// Rules (checked by decide()):
//  - a producer epoch older than the known one is fenced (stale_epoch);
//    a newer epoch resets the sequence (the producer restarted);
//  - sequence == last + 1 (or 0 for a new producer/epoch): append;
//  - sequence <= last and within the window: duplicate, with its offset;
//  - sequence <= last but older than the window: duplicate_unknown (stored
//    once, offset no longer known);
//  - sequence > last + 1: sequence_gap, an error the publisher sees.
//
// Memory: each producer costs kWindow offsets (64 KiB). A head admits at
// most `max_producers` (new producers beyond it are refused at hello), and
// every replica forgets producers idle for longer than the expiry (expire()).
// A forgotten producer that comes back is new to the head: its publisher
// follows the head's next sequence (0), which is safe because nothing it
// still holds unacknowledged can be that old (its retry timeout is far
// shorter than the expiry).
//
// Threading: owned by the partition's data-plane thread (_st).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace catena::chain {

// One producer's state as a sealed head hands it to the next chain's head
// (partition handoff): its epoch, its last sequence and the window's offsets
// as runs of consecutive sequences stored at consecutive offsets, so a
// producer that published alone costs one run whatever its window holds.
struct ProducerRun {
  std::uint64_t first_seq = 0;
  std::uint64_t first_offset = 0;
  std::uint32_t count = 0;
};
struct ProducerSnapshot {
  std::uint64_t producer_id = 0;
  std::uint64_t producer_epoch = 0;
  std::int64_t last_seq = -1;
  std::vector<ProducerRun> runs;  // oldest first, covering the window up to last_seq
};

enum class SeqDecision : std::uint8_t { append, duplicate, duplicate_unknown, sequence_gap, stale_epoch };

class ProducerState {
 public:
  // Offsets remembered per producer and partition. A publisher never has
  // more unacknowledged records than this in one partition (Publisher caps
  // max_in_flight to it), so every retry it can make finds its offset.
  static constexpr std::uint32_t kWindow = 8192;

  struct Entry {
    std::uint64_t epoch = 0;
    std::int64_t last_seq = -1;
    std::uint64_t last_used_ns = 0;  // clock of the replica, last record() or touch()
    std::vector<std::uint64_t> offsets = std::vector<std::uint64_t>(kWindow);  // seq s at s % kWindow
  };

  // What to do with (producer, epoch, seq). For `duplicate`, *offset is the
  // offset the record was stored at.
  SeqDecision decide(std::uint64_t producer, std::uint64_t epoch, std::uint64_t seq,
                     std::uint64_t* offset) const;
  // Records that (producer, epoch, seq) was stored at `offset`.
  void record(std::uint64_t producer, std::uint64_t epoch, std::uint64_t seq, std::uint64_t offset,
              std::uint64_t now_ns = 0);
  // A producer that is publishing (its session is open) is in use.
  void touch(std::uint64_t producer, std::uint64_t now_ns);
  // Forgets producers not used since `cutoff_ns`. Returns how many.
  std::size_t expire(std::uint64_t cutoff_ns);
  [[nodiscard]] bool knows(std::uint64_t producer) const { return map_.count(producer) != 0; }
  [[nodiscard]] std::size_t size() const { return map_.size(); }
  void clear() { map_.clear(); }

  // Handoff: takes the other state, keeping per producer the newer one.
  void merge(const ProducerState& other);
  // Handoff across chains: what this state knows, compactly, and taking it
  // in (per producer the newer epoch, or the later sequence, wins).
  [[nodiscard]] std::vector<ProducerSnapshot> snapshot() const;
  void merge(const std::vector<ProducerSnapshot>& snapshots, std::uint64_t now_ns);

  [[nodiscard]] const std::unordered_map<std::uint64_t, Entry>& entries() const { return map_; }
  void restore(std::uint64_t producer, const Entry& e) { map_[producer] = e; }

 private:
  std::unordered_map<std::uint64_t, Entry> map_;
};

}  // namespace catena::chain
