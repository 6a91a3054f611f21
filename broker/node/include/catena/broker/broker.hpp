// Broker: the node's data plane. Owns the fabric provider, the replicas this
// node holds (one per assigned partition), and three threads:
//  - the data-plane agent: runs every Replica's duty cycle with a back-off
//    idle strategy and applies commands (configuration, new links) between
//    passes, so replicas never see another thread;
//  - the acceptor: accepts fabric connections and reads each one's hello
//    (replica, publisher or subscriber) before handing it to the agent;
//    connections that send garbage or nothing are closed;
//  - the connector: opens links to successors and brings back their welcome.
// The control plane talks to the broker only through configure()/stats()
// (control/ wraps them in the Thrift BrokerAdmin service).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <catena/chain/replica.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/fabric.hpp>

namespace catena::broker {

struct BrokerConfig {
  std::string node_id;
  std::string provider = "soft";
  std::string fabric_listen = "127.0.0.1:0";
  std::uint32_t slot_count = 8;   // segment slots per partition replica
  std::uint64_t grace_ms = 5000;  // lagging readers' grace after expiry
  // An expired segment keeps its memory for reuse in place at least this
  // long past its grace (and at least the grace): chain::LogConfig::linger_ns.
  std::uint64_t segment_linger_ms = 1000;
  int pin_cpu = -1;  // pin the data-plane thread (-1: no)
  // What clients may hold on this node: sessions and producers per
  // partition replica; publisher ring memory for the whole node.
  chain::SessionLimits limits;
  std::uint64_t session_memory_bytes = 1ull << 30;
  // Segment memory all partition replicas on this node may hold (registered
  // memory: pinned on verbs). A slot takes a segment's worth when a segment
  // opens there and gives it back once the segment expired past its grace,
  // so what a node holds follows what it retains. Spent: heads wait to open
  // a segment (back-pressure, as a full log) and predecessors wait for a
  // slot, and the node logs it. 0: default_segment_memory_bytes(provider).
  std::uint64_t segment_memory_bytes = 0;
  // The smallest segment a head opens (chain::LogConfig::min_segment_bytes:
  // segments are sized by what the partition takes in, up to the channel's
  // segment_bytes). 0: every segment is segment_bytes.
  std::uint32_t min_segment_bytes = 64u << 10;
  // The data-plane thread runs housekeeping every 2 ms. Silent this long, it
  // is stalled (stuck, or dead): the node stops heartbeating and fails the
  // controller's probes, so its chains are repaired without it.
  std::uint64_t data_plane_stall_ms = 2000;
  // A partition that has wanted a link to its successor for this long
  // without one (dials failing, refused, or the link stalled) is reported to
  // the controller, and again every this long while it lasts: a fault only
  // the data plane sees, which the controller repairs if it persists.
  std::uint64_t link_report_ms = 1000;
  // A successor link that completes none of the writes in flight on it for
  // this long is dropped and rebuilt (chain::ReplicaConfig::link_stall_ns):
  // TCP into a cut, RNR retries without end. Keep it above the transport's
  // own loss recovery (verbs queue pairs fail a dead peer after ~2 s).
  std::uint64_t link_stall_ms = 6000;
  // Kept memory (process-level recovery): replicas' segments live in this
  // directory, on a memory filesystem (/dev/shm/...), so that this node,
  // restarted after a crash, finds what it held, registers saying so, and
  // catches up only what it missed. One process at a time. Empty: none (a
  // restarted node is empty). Only the soft provider keeps memory so far.
  std::string keep_dir;
};

// A neighbour in one chain that the data plane lost or cannot reach.
struct LinkReport {
  std::string suspect;  // node id
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;  // the route epoch the replica was at
  std::string reason;
};

struct PartitionStats {
  std::string channel;
  std::uint32_t partition = 0;
  std::uint64_t epoch = 0;
  std::uint32_t position = 0;
  std::uint32_t chain_length = 0;
  chain::ReplicaStats replica;
  // The replica's live counters (any thread reads them; README "Metrics").
  // Null for kept replicas no chain has claimed.
  std::shared_ptr<const chain::ReplicaCounters> counters;
};

struct NodeStats {
  std::uint64_t segments = 0;
  std::uint64_t bytes = 0;
  std::uint64_t connections = 0;
  std::vector<PartitionStats> partitions;
  // Replicas found in kept memory at start that no chain has claimed yet
  // (BrokerConfig::keep_dir): reported when registering, with the offset
  // their data was known committed to (replica.commit_offset/end_offset).
  std::vector<PartitionStats> kept;
  // Bytes of replica memory zeroed since the broker started: every
  // replica's segments (and kept meta page) when it stops being that
  // replica's (fenced, left out of its chain, a retired range let go or
  // expired, a kept copy no chain wants). See README, "Tenants".
  std::uint64_t zeroed_bytes = 0;
  // Successor links this node rebuilt in place (same route epoch, without
  // the controller: partition-level recovery) since it started.
  std::uint64_t link_rebuilds = 0;
  // Bytes of fabric memory the node has registered (every region its
  // provider allocated and still holds: segments, rings, link buffers).
  std::uint64_t registered_bytes = 0;
  // Memory given back that the provider keeps ready for the next segment
  // (Provider::warm_bytes: soft and verbs `warm=<MiB>`).
  std::uint64_t warm_bytes = 0;
  // Segment memory held by replicas, its limit (BrokerConfig::
  // segment_memory_bytes), and segments refused for want of it since start.
  std::uint64_t segment_memory_bytes = 0;
  std::uint64_t segment_memory_limit_bytes = 0;
  std::uint64_t segment_memory_refusals = 0;
  // Traced records (PublisherOptions::trace_stages): their latency from
  // publish to each chain position a replica here holds, since start.
  struct Stage {
    std::uint32_t position = 0;  // 0: appended at the head; k: received k hops down
    chain::StageLatency::Summary latency;
  };
  std::vector<Stage> stage_latency;
};

enum class ConfigureStatus : std::uint8_t { applied, stale_epoch, invalid, failed };

struct ConfigureResult {
  ConfigureStatus status = ConfigureStatus::failed;
  std::uint64_t current_epoch = 0;
  std::string message;
};

// Partition handoff: what sealing a head found (see chain::SealState).
struct SealResult {
  ConfigureStatus status = ConfigureStatus::failed;
  std::uint64_t current_epoch = 0;
  std::string message;
  chain::SealState state;
};

// Channel alter: a marker at a head (see chain::MarkerState).
struct MarkerResult {
  ConfigureStatus status = ConfigureStatus::failed;
  std::uint64_t current_epoch = 0;
  std::string message;
  chain::MarkerState state;
};

// The segment memory a node may hold when BrokerConfig::segment_memory_bytes
// is 0: with the soft provider's arena on huge pages (`soft:...,huge=<MiB>`)
// 3/4 of that arena, the rest left to publisher rings and link buffers (so a
// full arena is a spent budget that says so, not a failed allocation); else
// half the machine's physical memory.
[[nodiscard]] std::uint64_t default_segment_memory_bytes(std::string_view provider);

class Broker {
 public:
  static fabric::Result<std::unique_ptr<Broker>> start(
      const BrokerConfig& cfg, const catena::Clock& clock = catena::SteadyClock::instance());
  // Same, on a provider the caller opened (cfg.provider is ignored): tests
  // pass a fabric::FaultProvider and keep its injector.
  static fabric::Result<std::unique_ptr<Broker>> start(
      const BrokerConfig& cfg, std::unique_ptr<fabric::Provider> provider,
      const catena::Clock& clock = catena::SteadyClock::instance());
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  [[nodiscard]] std::string fabric_address() const;
  [[nodiscard]] const BrokerConfig& config() const;

  // Any thread. Creates or reconfigures this node's replica of a partition;
  // waits until the data-plane thread applied it.
  ConfigureResult configure(const chain::ReplicaConfig& cfg);
  // Same, and a new replica (a new chain's head) takes in this producer
  // state first (partition handoff).
  ConfigureResult configure(const chain::ReplicaConfig& cfg,
                            const std::vector<chain::ProducerSnapshot>& producers);
  // Partition handoff. seal(): the head at `epoch` takes no more appends
  // (stale_epoch at another epoch, invalid if not the head or not held).
  SealResult seal(const std::string& channel, std::uint32_t partition, std::uint64_t epoch);
  // Channel alter: the head at `epoch` appends (or finds) the marker of
  // marker.generation (chain::Replica::append_marker_st); statuses as seal().
  MarkerResult append_marker(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                             const chain::MarkerSpec& marker);
  // The replica written at `epoch` becomes the read-only range [start,
  // range_end) (chain::Replica::retire_st), kept apart from the partition's
  // current replica until it expires or drop_retired() lets it go.
  // Idempotent; a no-op if no replica of that epoch is held. `next` says
  // where the range after it is served, if the route told (epoch 0: not),
  // for the `moved` answers (chain::Replica::set_next_chain_st); a repeated
  // call may tell a newer one.
  struct NextChain {
    std::uint64_t epoch = 0;
    std::string head_addr;
  };
  ConfigureResult retire(const std::string& channel, std::uint32_t partition, std::uint64_t epoch,
                         std::uint64_t range_end, NextChain next);
  // The partition's access secret (ChainAssignment.access_secret, whatever
  // the epoch): its replica here and every retired range of it take it; one
  // whose secret changes closes its client sessions
  // (chain::Replica::set_access_secret_st).
  void set_access_secret(const std::string& channel, std::uint32_t partition,
                         const chain::wire::AccessSecret& secret);
  // A tenant's limits on this node (ChainAssignment.tenant), shared by the
  // replicas of its partitions here: the publisher ring memory its sessions
  // may pin (~0: unlimited), the bytes per second its publishers may
  // append (0: unlimited) and the client sessions it may hold (~0u:
  // unlimited). Replicas created from then on with that tenant use them, and
  // new values apply to the ones already there.
  void set_tenant_limits(const std::string& tenant, std::uint64_t publisher_ring_bytes,
                         std::uint64_t publish_bytes_per_sec, std::uint32_t sessions);
  // Drops the retired ranges of a partition whose epochs `keep` does not list.
  void drop_retired(const std::string& channel, std::uint32_t partition, std::vector<std::uint64_t> keep);
  // Drops this node's replica of a partition if its epoch is <= `epoch`.
  ConfigureResult fence(const std::string& channel, std::uint32_t partition, std::uint64_t epoch);
  // Any thread: a snapshot refreshed by the data-plane thread every few ms.
  NodeStats stats() const;
  // Neighbours the data plane found unreachable since the last call (lost or
  // stalled links, successors it has not reached for link_report_ms).
  std::vector<LinkReport> take_link_reports();
  // The controller assigns ids at registration, after the fabric listener
  // exists (its address is part of the registration).
  void set_node_id(const std::string& node_id);
  [[nodiscard]] std::string node_id() const;
  // The incarnation the controller gave this process at registration (0:
  // not registered). Assignments naming another incarnation are refused.
  void set_node_epoch(std::uint64_t node_epoch);
  [[nodiscard]] std::uint64_t node_epoch() const;
  // Any thread: 0 while the data-plane thread runs; how long it has been
  // silent (ms) once that passed BrokerConfig::data_plane_stall_ms.
  [[nodiscard]] std::uint64_t data_plane_stalled_ms() const;
  // The node was fenced: every replica keeps its data but acts on nothing
  // (no acks, no reads served) until a configure() at a newer epoch names
  // it again or a fence() drops it.
  void suspend_all();
  // Any thread. Replicas acknowledge and serve only while the data-plane
  // clock (catena::Clock::now_ns) is below this deadline: the controller's
  // lease, measured from when the last answered heartbeat was sent. Read
  // once per duty-cycle pass. Until it is first set there is no lease.
  void set_lease_deadline(std::uint64_t deadline_ns);
  [[nodiscard]] const catena::Clock& clock() const;

  void stop();

  class Impl;

 private:
  explicit Broker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace catena::broker
