// A replica's counters for monitoring (catenad's Prometheus endpoint, see
// README "Metrics"). Written by the replica's data-plane thread only, with a
// relaxed load and store (one writer: no read-modify-write, no lock, no
// allocation, no system call on the data path); read by any thread with a
// relaxed load. The replica shares them (Replica::counters()) so a reader
// may outlive it. Counters only grow; gauges (offsets, backlog) are set.
#pragma once

#include <atomic>
#include <cstdint>

namespace catena::chain {

struct ReplicaCounters {
  // Records and bytes this replica appended: at a head, from publishers
  // (frame bytes, header included); elsewhere, what its predecessor wrote
  // (records from the log's end offset, bytes from the segments' valid ends).
  std::atomic<std::uint64_t> appended_records{0};
  std::atomic<std::uint64_t> appended_bytes{0};
  // A head: records and frame bytes acknowledged ok to publishers (once
  // committed); refusals are not counted.
  std::atomic<std::uint64_t> acked_records{0};
  std::atomic<std::uint64_t> acked_bytes{0};
  // A head: passes that found a publisher's next frame blocked because the
  // log was full (log_full: no free segment) or the tenant's publish rate
  // was spent. Both are back-pressure: the frame waits in the ring.
  std::atomic<std::uint64_t> log_full_events{0};
  std::atomic<std::uint64_t> rate_limited_events{0};
  // Segments this replica could not open (a head) or let its predecessor
  // write (a slot grant refused) because the node's segment memory budget
  // (BrokerConfig::segment_memory_bytes) was spent: back-pressure too.
  std::atomic<std::uint64_t> segment_memory_refusals{0};
  // A head: frames refused sequence_gap (a producer skipped a sequence).
  std::atomic<std::uint64_t> sequence_gaps{0};
  // Bytes written to the successor.
  std::atomic<std::uint64_t> forwarded_bytes{0};
  // Predecessor links attached (the first and every reconnect) and
  // successor links lost (each is rebuilt by the broker).
  std::atomic<std::uint64_t> predecessor_links{0};
  std::atomic<std::uint64_t> successor_links_lost{0};
  // Gauges, refreshed every tick: the log's end and commit offsets (records)
  // and the bytes the successor does not hold yet (-1: no successor link).
  std::atomic<std::uint64_t> end_offset{0};
  std::atomic<std::uint64_t> commit_offset{0};
  std::atomic<std::int64_t> successor_backlog_bytes{-1};

  // Data-plane thread only (the single writer).
  static void add(std::atomic<std::uint64_t>& c, std::uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  template <typename T>
  static void set(std::atomic<T>& g, T v) {
    g.store(v, std::memory_order_relaxed);
  }
  // Any thread.
  template <typename T>
  static T read(const std::atomic<T>& c) {
    return c.load(std::memory_order_relaxed);
  }
};

}  // namespace catena::chain
