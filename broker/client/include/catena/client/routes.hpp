// Where clients learn routes: partition -> chain (replica addresses, head
// first) with its epoch. Public (the standard library only):
// catena::connect() (<catena/client/connect.hpp>) returns the controller's
// RouteSource; a program may also implement its own. Inside the library,
// StaticRoutes (<catena/broker/routes.hpp>) sets them by hand for tests and
// tools. Errors are client::Errors: an implementation maps its own (the
// controller's codes, the fabric's) to them.
//
// Implementations are thread-safe: a Publisher or Subscriber calls route()
// and report_unreachable() from its worker thread, the rest from the thread
// that creates or polls it. A call may wait (on the controller); the
// clients never wait for one inside poll().
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <catena/client/api.hpp>
#include <catena/client/error.hpp>

namespace catena {

struct ReplicaAddress {
  std::string node_id;
  std::string fabric_addr;
};

// Offsets an earlier chain of the partition wrote and still serves,
// read-only (partition handoff): [start_offset, end_offset).
struct RouteRange {
  std::uint64_t start_offset = 0;
  std::uint64_t end_offset = 0;
  std::uint64_t epoch = 0;  // its chain's epoch: what a subscriber's hello names to read it
  std::vector<ReplicaAddress> replicas;
};

struct Route {
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;
  std::vector<ReplicaAddress> replicas;  // head first, tail last
  std::uint64_t start_offset = 0;        // the chain above serves [start_offset, ...)
  std::vector<RouteRange> sealed;        // earlier ranges, oldest first
  // What every hello to the partition's replicas carries
  // (PartitionRoute.access_secret); all zero where replicas ask for none
  // (chains configured by hand).
  std::array<std::uint8_t, 16> access_secret{};

  // The sealed range holding `offset`, or nullptr (the chain above holds it,
  // or it is gone).
  [[nodiscard]] const RouteRange* range_of(std::uint64_t offset) const {
    if (offset >= start_offset) return nullptr;
    for (const auto& r : sealed) {
      if (offset >= r.start_offset && offset < r.end_offset) return &r;
    }
    return nullptr;
  }
  // Whether the partition continues without a gap from a chain that started
  // at `from` up to start_offset (handoffs), as opposed to having been
  // rebuilt above lost offsets.
  [[nodiscard]] bool continues(std::uint64_t from) const {
    std::uint64_t at = from;
    for (const auto& r : sealed) {
      if (r.start_offset == at) at = r.end_offset;
    }
    return at == start_offset;
  }
};

// Who a publisher is: an id and an epoch issued for this run of it.
struct ProducerIdentity {
  std::uint64_t producer_id = 0;
  std::uint64_t producer_epoch = 0;
};

struct ChannelLayout {
  std::uint32_t partitions = 0;
  std::uint32_t segment_bytes = 0;
  // The channel generation `partitions` belongs to: the last complete one
  // (0: as created). A publisher maps keys by it and names it in its hellos.
  std::uint64_t generation = 0;
  // Partitions with a route: more than `partitions` after a shrink, whose
  // removed partitions keep theirs while readers may need their records
  // (0: as many as `partitions`).
  std::uint32_t routed = 0;
};

class CATENA_API RouteSource {
 public:
  virtual ~RouteSource() = default;
  virtual client::Result<ChannelLayout> layout(const std::string& channel) = 0;
  // The current route; `known_epoch` is the one the caller found stale (0: none).
  virtual client::Result<Route> route(const std::string& channel, std::uint32_t partition,
                                      std::uint64_t known_epoch) = 0;
  // A new epoch for `producer_id` (0: a new id too), newer than every epoch
  // issued before: called once per Publisher, so a restarted publisher's new
  // records are never mistaken for retries of its old ones.
  virtual client::Result<ProducerIdentity> init_producer(std::uint64_t producer_id) = 0;
  // A client could not reach `node_id`: a hint for the failure detector.
  virtual void report_unreachable(const std::string& node_id, const Route& route,
                                  const std::string& reason) = 0;
  // Subscriber-group positions (offset of the next record to consume).
  virtual client::Result<void> commit_offset(const std::string& group, const std::string& channel,
                                             std::uint32_t partition, std::uint64_t offset) = 0;
  virtual client::Result<std::uint64_t> committed_offset(const std::string& group, const std::string& channel,
                                                         std::uint32_t partition) = 0;
};

}  // namespace catena
