// catena::Mirror: a channel mirrored to a second cluster (another
// datacenter), the datacenter level of recovery.
//
// A mirror reads the committed records of a channel on the source cluster
// (a Subscriber) and publishes them to the channel of the same name on the
// destination cluster (a Publisher with the mirror's own producer id),
// partition p to partition p in source offset order: per-key order holds
// on the destination as on the source. Replication is asynchronous: what
// the source committed and the mirror has not yet had acknowledged by the
// destination (the lag) is lost if the source datacenter is lost.
//
// State (MirrorState) lives in a small file, <state_dir>/<name>.mirror,
// rewritten atomically (write, fsync, rename) after the destination
// acknowledged what it records, at most every save_interval:
//   - per partition, `next`: the next source offset to mirror and the
//     destination offset it will land at;
//   - the offset map: runs (source s, destination d) meaning source record
//     s+k is destination record d+k up to the next run. A new run starts
//     only where the source skips offsets (an alter's marker, which is not
//     mirrored, or records that expired before the mirror read them), so a
//     record's destination offset is exact, not an estimate;
//   - the source's committed end as last seen, and the lag.
// The mirrored position is also committed on the source cluster as the
// offsets of the group `mirror.<name>` (visible to `catena group
// describe`), after the destination acknowledged it.
//
// Restart without duplicates: a mirror killed after the destination stored
// a batch but before the file recorded it finds those records on start
// (it reads the destination partition from `next.destination` until it is
// quiet for settle_time: records of its own producer id) and moves `next`
// past them instead of publishing them again. The destination channel must
// be written by the mirror only (a record of another producer there stops
// the mirror with invalid_argument).
//
// Failover (explicit): MirrorState::map() turns a subscriber's source
// position into the destination offset to go on from (records the mirror
// never copied map to the destination's end: they are the loss); a
// publisher simply publishes to the destination cluster (same partition
// count, so keys land in the same partitions).
//
// Not done: following a source channel alter (the mirror stops at a
// partition count change only by error), policy-driven automatic failover,
// mirroring back after the source returns.
//
// Threading: run() is one polling loop on the caller's thread; state() and
// stop() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <catena/broker/client_error.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena {

struct MirrorPair {
  std::uint64_t source = 0;
  std::uint64_t destination = 0;
};

struct MirrorPartition {
  // Next source offset to mirror, and the destination offset it lands at.
  MirrorPair next;
  // Starts of contiguous runs, ascending (the offset map).
  std::vector<MirrorPair> runs;
  // The source partition's committed end as the mirror last saw it.
  std::uint64_t source_end = 0;
  // Upper bound on the age of the oldest record not yet mirrored (the
  // publisher timestamp of the newest mirrored one, when records wait).
  std::uint64_t lag_ms = 0;
  std::uint64_t last_timestamp_ns = 0;  // of the newest mirrored record
  std::uint64_t mirrored_records = 0;   // since the mirror was created
  std::uint64_t mirrored_bytes = 0;
  std::uint64_t skipped_on_restart = 0;  // found already in the destination

  [[nodiscard]] std::uint64_t lag_records() const {
    return source_end > next.source ? source_end - next.source : 0;
  }
};

struct MirrorState {
  std::string name;
  std::string channel;
  std::string source;       // source controller address(es)
  std::string destination;  // destination controller address(es)
  std::uint64_t producer_id = 0;
  std::uint64_t updated_unix_ms = 0;
  std::vector<MirrorPartition> partitions;

  // The destination offset a reader positioned at `source_offset` of the
  // source partition goes on from.
  [[nodiscard]] std::uint64_t map(std::uint32_t partition, std::uint64_t source_offset) const;
  [[nodiscard]] std::uint64_t lag_records() const;

  static client::Result<MirrorState> load(const std::string& path);
  [[nodiscard]] client::Result<void> save(const std::string& path) const;
};

// <state_dir>/<name>.mirror
std::string mirror_state_path(const std::string& state_dir, const std::string& name);

struct MirrorOptions {
  std::string provider = "soft";
  std::string state_dir = "catena-mirrors";
  std::uint32_t max_batch = 1024;  // source records per destination round trip
  std::chrono::milliseconds save_interval{100};
  std::chrono::milliseconds source_status_interval{500};  // source end offsets (lag)
  std::chrono::milliseconds settle_time{300};             // restart: destination quiet this long
  std::chrono::milliseconds controller_timeout{1000};
  // The clusters' tokens (README "Tenants"), where they require one: the
  // admin's, or (source) a tenant's whose namespace holds the channel and
  // the group mirror.<name>. Never written to the state file.
  std::string source_token;
  std::string destination_token;
};

class Mirror {
 public:
  // Records a new mirror of `channel` from `source` to `destination`
  // (controller addresses) in <state_dir>/<name>.mirror, creating the
  // destination channel if missing with the source's partition count,
  // replication, segment size and TTL. Again with the same arguments: the
  // existing state, unchanged. Errors: unknown_channel (not on the source),
  // invalid_argument (a bad name, a destination channel with another
  // partition count, a mirror of that name with other arguments),
  // controller_unavailable (a cluster that cannot be reached; the message
  // says which).
  static client::Result<MirrorState> create(const std::string& name, const std::string& channel,
                                            const std::string& source, const std::string& destination,
                                            const std::string& state_dir,
                                            const std::string& source_token = {},
                                            const std::string& destination_token = {});

  // Loads <state_dir>/<name>.mirror.
  static client::Result<std::unique_ptr<Mirror>> open(const std::string& name, MirrorOptions opts);
  ~Mirror();
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  // Mirrors until stop() or an error (the destination unreachable past its
  // publisher's retry timeout, a record refused, a foreign record in the
  // destination). Saves the state before returning.
  client::Result<void> run();
  void stop() { stop_.store(true); }

  [[nodiscard]] MirrorState state() const EXCLUDES(mu_);

 private:
  Mirror(MirrorState st, MirrorOptions opts);
  client::Result<void> reconcile(MirrorState& st);

  MirrorOptions opts_;
  std::string path_;
  std::atomic<bool> stop_{false};
  mutable Mutex mu_;
  MirrorState state_ GUARDED_BY(mu_);
};

}  // namespace catena
