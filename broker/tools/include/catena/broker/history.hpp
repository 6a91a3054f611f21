// HistoryChecker: records what publishers and subscribers saw during a run
// (every publish with its acknowledged offset or its error, every delivery)
// and verifies the guarantees afterwards:
//  - every acknowledged record is delivered to every subscriber exactly once,
//    at its acknowledged offset, with its payload intact;
//  - deliveries of a partition come in increasing offset order;
//  - nothing is delivered that was never published;
//  - an offset is never reused for two different records.
// A record whose publish failed (or is still unacknowledged when the run
// ends) may or may not be delivered: its ack may have been lost with a failed
// node after it committed. If it is delivered, it must still be delivered
// once, intact, and at one offset only.
//
// Records are identified by a 64-bit id the test puts in the payload; the
// checker keeps a hash of each payload.
//
// Thread-safe: publishers and subscribers may record from their own threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <catena/fabric/thread_annotations.hpp>

namespace catena {

struct HistoryReport {
  std::uint64_t published = 0;
  std::uint64_t acknowledged = 0;
  std::uint64_t failed = 0;
  std::uint64_t delivered = 0;   // over all subscribers
  std::uint64_t lost = 0;        // acked but missing at some subscriber
  std::uint64_t duplicated = 0;  // delivered more than once to one subscriber
  std::uint64_t out_of_order = 0;
  std::uint64_t corrupted = 0;         // payload differs from what was published
  std::uint64_t phantom = 0;           // delivered but never published
  std::uint64_t offset_conflicts = 0;  // one offset, two records (or acked offset != delivered)
  std::uint64_t declared_lost = 0;     // acked, missing, and inside a range a data_lost notice named
  std::vector<std::string> examples;   // the first few violations, for people

  [[nodiscard]] bool ok() const {
    return lost == 0 && duplicated == 0 && out_of_order == 0 && corrupted == 0 && phantom == 0 &&
           offset_conflicts == 0;
  }
  [[nodiscard]] std::string summary() const;
};

class HistoryChecker {
 public:
  explicit HistoryChecker(int subscribers) : subscribers_(subscribers) {}

  void published(std::uint64_t id, std::span<const std::byte> payload);
  void acknowledged(std::uint64_t id, std::uint32_t partition, std::uint64_t offset);
  void failed(std::uint64_t id);
  void delivered(int subscriber, std::uint32_t partition, std::uint64_t offset, std::uint64_t id,
                 std::span<const std::byte> payload);

  // The subscriber was told (a data_lost notice) that offsets [from, to) of
  // the partition are gone: acknowledged records there that it never got
  // count as declared_lost, not lost. Anything it did get there still counts.
  void declare_lost(int subscriber, std::uint32_t partition, std::uint64_t from, std::uint64_t to);

  [[nodiscard]] HistoryReport check() const;

  static std::uint64_t hash(std::span<const std::byte> payload);

 private:
  struct Record {
    std::uint64_t hash = 0;
    bool acked = false;
    bool failed = false;
    std::uint32_t partition = 0;
    std::uint64_t offset = 0;
  };
  struct Delivery {
    std::uint32_t partition;
    std::uint64_t offset;
    std::uint64_t id;
    std::uint64_t hash;
  };

  struct LostRange {
    int subscriber;
    std::uint32_t partition;
    std::uint64_t from;
    std::uint64_t to;
  };
  int subscribers_;
  mutable Mutex mu_;
  std::vector<LostRange> lost_ranges_ GUARDED_BY(mu_);
  std::unordered_map<std::uint64_t, Record> records_ GUARDED_BY(mu_);
  std::vector<std::vector<Delivery>> deliveries_ GUARDED_BY(mu_) =
      std::vector<std::vector<Delivery>>(subscribers_);
};

}  // namespace catena
