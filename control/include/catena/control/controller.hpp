// The controller core: cluster membership, channels, routes and epochs, the
// failure detector and chain repair. Transport-independent: the Thrift
// server (controller_server.hpp) is a thin adapter over it, and tests drive
// it directly with a ManualClock and an InProcBrokerAdmin.
//
// Epoch authority: the controller is the only component that creates epochs.
// A node_epoch is handed out by registerNode (a cluster-wide counter); a
// route epoch starts at 1 (above every epoch of a deleted channel:
// channel_epoch_floor) and grows by one with every change of the chain.
// Both are made durable before anyone hears of them, so no epoch is ever
// issued twice, even across controller restarts.
//
// Reconfiguration protocol (all durable steps go to the metadata WAL first):
//   create channel  placement -> routes at epoch 1 persisted -> configureChain
//                   pushed to every replica before the call returns.
//   node DEAD       [intent: node dead + routes it is in] -> every such route
//                   loses the node at epoch+1 (head dies: next is head; tail
//                   dies: predecessor is tail; middle: predecessor links to
//                   successor; a joining node just leaves) -> pushed to the
//                   remaining replicas -> once they all acknowledged it,
//                   replacements join behind the tail (route.joining) at
//                   epoch+1 again: first a node that registered again
//                   holding the partition (it rejoins with its data), then,
//                   after Options::replacement_delay, nodes placed by zone,
//                   datacenter and load (controller_rejoin.cpp,
//                   placement.hpp) -> pushed; the tail
//                   copies every retained segment to joining[0] while it
//                   keeps committing; once it owes at most
//                   chain::limits::join_sync_backlog_bytes() the tail syncs
//                   joining[0] (its commit waits for it) -> once every member
//                   acknowledged the epoch and the tail's heartbeat reports,
//                   at that epoch, joining[0] synced (it holds every
//                   committed record), joining[0] becomes the tail at
//                   epoch+1 (one at a time) -> intent closed when every route
//                   has R replicas (joining ones do not count) and is acked.
//                   A chain never loses its last member: it stays (the
//                   partition unavailable) until the node registers again,
//                   with the data (back at epoch+1) or without it (route
//                   emptied; replacements form the chain directly, starting
//                   at the next offset generation above the partition's
//                   high-water mark).
//   safety          a dead verdict is held while the node's lease may be
//                   valid, and while more than isolation_percent of the
//                   nodes are silent at once (the controller is cut off).
//   restart         the store replays; unfinished removals are redone before
//                   anything else runs, and every route is pushed again.
//
// Pushes that fail are not lost: each replica that has not acknowledged its
// route's current epoch is retried by tick() with per-node exponential
// back-off (push_retry_initial doubling to push_retry_max); a heartbeat from
// the node cuts its back-off short so it is retried on the next tick.
// configureChain is idempotent at a given epoch, so retries are safe.
//
// Thread: every public method is thread-safe. tick() is meant to be called
// by one maintenance thread (the server runs one; tests call it directly);
// RPCs to brokers are never made while the controller's lock is held.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <catena/control/broker_admin.hpp>
#include <catena/control/controller_groups.hpp>
#include <catena/control/failure_detector.hpp>
#include <catena/control/idl/catena_meta_types.h>
#include <catena/control/metadata_store.hpp>
#include <catena/control/placement.hpp>
#include <catena/control/rebalance_plan.hpp>
#include <catena/control/result.hpp>
#include <catena/fabric/clock.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class RpcPool;  // src/rpc_pool.hpp

// What a Controller has done since it opened its metadata (this process's
// leadership), for the metrics endpoint. Counted when the record that does
// it commits; relaxed atomics, read from any thread.
struct ControllerCounters {
  std::atomic<std::int64_t> evictions{0};          // nodes declared dead and fenced (a repair opened)
  std::atomic<std::int64_t> repairs_completed{0};  // repairs closed: their chains back to full replication
  std::atomic<std::int64_t> route_epoch_bumps{0};  // routes committed at a newer epoch than they had
};

class Controller {
 public:
  struct Options {
    // Where the metadata lives: empty for the log + snapshot store in
    // data_dir, zk://host:port[,host:port...][/chroot] for ZooKeeper
    // (open_metadata_store()).
    std::string metadata;
    std::filesystem::path data_dir = "catena-controller-data";
    std::chrono::milliseconds heartbeat_interval{100};  // told to brokers at registration
    std::chrono::milliseconds heartbeat_timeout{500};   // silence before a node is SUSPECT
    int probe_attempts = 2;                             // failed probes in a row before DEAD
    // A node that answers probes but whose heartbeats have not arrived for
    // this long is evicted (an asymmetric cut: its lease lapsed, its chains
    // stall). Zero: 4 x heartbeat_timeout.
    std::chrono::milliseconds heartbeat_loss{0};
    // How long a broker may act (acknowledge, serve) on its chain roles after
    // it sent a heartbeat the controller answered; told in RegisterReply.
    // Zero: heartbeat_timeout / 2. Must lie strictly between
    // heartbeat_interval and heartbeat_timeout, so that a node is renewed
    // several times per lease and its lease has lapsed before it can be
    // suspected. A dead verdict is also held until the node was silent for
    // longer than lease + heartbeat_interval (reports can suspect sooner).
    std::chrono::milliseconds lease{0};
    // More than this percentage of the watched nodes silent at once: the
    // controller assumes it is the one cut off and evicts nobody until they
    // are heard from again. 100 never assumes it.
    int isolation_percent = 50;
    // A chain link its predecessor keeps reporting broken (failure reports
    // naming the partition at its current route epoch, no two further apart
    // than half of this) over this long a span, while
    // the successor still answers every probe, is a fault only the data
    // plane sees: the successor is evicted and its chains repaired. If that
    // reporter's reports already evicted a node within 10x this time, the
    // reporter is evicted instead: it is the common factor. Long enough that
    // slow link setups (rdma_cm on soft-RoCE under emulation takes seconds)
    // never look like a fault.
    std::chrono::milliseconds link_fault_timeout{10000};
    // A move gives up (and the old chain goes on) if the sealed head has not
    // committed everything it holds within this long.
    std::chrono::milliseconds move_commit_timeout{10000};
    // A channel alter stops waiting for a marker to commit after this long
    // (the alter stays open; tick() or the next alterChannel goes on).
    std::chrono::milliseconds marker_commit_timeout{10000};
    std::chrono::milliseconds push_retry_initial{100};
    std::chrono::milliseconds push_retry_max{5000};
    std::uint64_t snapshot_every_records = 1000;
    // The wall clock, in ms since the Unix epoch, that stamps sealed ranges
    // (SealedRange.sealed_at_ms) and decides when their records expired
    // (sealed_at_ms + the channel's ttl_ms: the range leaves the route).
    // Empty: the system clock. Tests inject one.
    std::function<std::int64_t()> wall_clock_ms;
    // Fault injection for restart tests: called at "create.committed" (a
    // channel recorded, not pushed yet), "repair.intent_written",
    // "repair.removed", "repair.restored" (replacements joining) and
    // "repair.promoted" (a joining replica became the tail), "move.intent_written",
    // "move.sealed" and "move.committed" (partition handoff), "drain.begun"
    // (a drain recorded) and "drain.done" (a node marked DRAINED),
    // "alter.begun" (a channel alter recorded) and "alter.marker" (a marker's
    // offset recorded, the generation not complete yet). Returning true
    // stops the controller on the spot, as if its process died there; every
    // later call fails with INTERNAL and the object can only be destroyed.
    std::function<bool(std::string_view point)> crash_point;
    // Subscriber groups (controller_groups.hpp): a member not heard from for
    // this long is dropped; members heartbeat every heartbeat_interval.
    std::chrono::milliseconds group_session_timeout{10000};
    std::chrono::milliseconds group_heartbeat_interval{1000};
    // The ZooKeeper session of a zk:// store (ControllerConfig::zk_session_timeout_ms).
    std::chrono::milliseconds zk_session_timeout{10000};
    // How long a zk:// store waits to connect, and a commit that lost its
    // connection waits for it to come back before the store fails.
    std::chrono::milliseconds zk_connect_timeout{10000};
    // A chain that lost a member to an eviction waits this long (from the
    // eviction, on this controller's clock; a restart waits again) for that
    // node to register again with the data it kept (it then rejoins behind
    // the tail, copying only what it lacks) before placement picks another
    // node. The wait ends early when the node registers without the
    // partition. Zero: replace at once.
    std::chrono::milliseconds replacement_delay{0};
    // BrokerAdmin calls of a push or probe round run on this many threads
    // (one task per broker): a round to N brokers takes ceil(N / threads)
    // RPC times at worst, and never N threads.
    int broker_rpc_threads = 16;
  };

  [[nodiscard]] static Result<std::unique_ptr<Controller>> open(Options options, const Clock& clock,
                                                                BrokerAdminClient& brokers);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // held: what the node says it still holds (see registerNode in catena.thrift).
  [[nodiscard]] Result<idl::RegisterReply> register_node(
      const idl::NodeInfo& info, const std::vector<idl::PartitionProgress>& held = {});
  [[nodiscard]] Result<idl::HeartbeatReply> heartbeat(const idl::HeartbeatRequest& request);
  [[nodiscard]] Result<idl::ChannelInfo> create_channel(const idl::ChannelConfig& config);
  [[nodiscard]] Result<std::vector<idl::ChannelInfo>> list_channels() const;
  [[nodiscard]] Result<idl::ChannelInfo> describe_channel(const std::string& name) const;
  [[nodiscard]] Result<idl::PartitionRoute> get_route(const std::string& channel, std::int32_t partition,
                                                      std::int64_t known_epoch) const;
  // The partition's access secret (PartitionRoute.access_secret): derived
  // from the link key, the same for every route epoch of the partition.
  [[nodiscard]] std::string access_secret(const std::string& channel, std::int32_t partition) const;
  // Taken if the controller's lock is free within kReportWaitsForLock (at
  // once when reports are queued already); otherwise (a change may be
  // waiting for ZooKeeper under it, and a broker reports from the thread
  // that heartbeats) queued for the next tick and answered ok, its checks
  // (unknown node, stale epoch) logged instead of answered. At most
  // kMaxQueuedReports wait; past that UNAVAILABLE.
  [[nodiscard]] Result<void> report_failure(const idl::FailureReport& report);
  static constexpr std::size_t kMaxQueuedReports = 1024;
  static constexpr std::chrono::milliseconds kReportWaitsForLock{20};
  // See declarePartitionLost in catena.thrift.
  [[nodiscard]] Result<idl::PartitionRoute> declare_partition_lost(const std::string& channel,
                                                                   std::int32_t partition);
  // See movePartition in catena.thrift (tail-offset handoff).
  [[nodiscard]] Result<idl::PartitionRoute> move_partition(const std::string& channel, std::int32_t partition,
                                                           const std::vector<std::string>& to)
      EXCLUDES(move_mu_, mu_);
  [[nodiscard]] Result<idl::ClusterStatus> cluster_status() const;
  // See alterChannel in catena.thrift (controller_rescale.cpp).
  [[nodiscard]] Result<idl::ChannelInfo> alter_channel(const std::string& name, std::int32_t partitions)
      EXCLUDES(alter_mu_, mu_);
  // See alterRetention in catena.thrift (controller_retention.cpp).
  [[nodiscard]] Result<idl::ChannelInfo> alter_retention(const std::string& name, std::int64_t ttl_ms)
      EXCLUDES(alter_mu_, mu_);
  // See deleteChannel in catena.thrift (controller_delete.cpp).
  [[nodiscard]] Result<void> delete_channel(const std::string& name);
  // See drainNode in catena.thrift: checks and records the drain; tick()
  // replaces the node's replicas (controller_drain.cpp).
  [[nodiscard]] Result<idl::NodeStatus> drain_node(const std::string& node_id);
  // See rebalance in catena.thrift (the plan: rebalance_plan.hpp).
  [[nodiscard]] Result<idl::RebalancePlan> rebalance(bool dry_run) EXCLUDES(rebalance_mu_, move_mu_, mu_) {
    return rebalance(dry_run, RebalanceScope::replicas_and_roles);
  }
  // Evens out head and tail counts by reordering chains, never changing
  // their members (RebalanceScope::roles): what a repair skews (the dead
  // head's successor heads, its replacement is the tail). Run every
  // ControllerServer role_balance_interval; the plan's moves, made.
  [[nodiscard]] Result<idl::RebalancePlan> balance_roles() EXCLUDES(rebalance_mu_, move_mu_, mu_) {
    return rebalance(false, RebalanceScope::roles);
  }
  // See addNode in catena.thrift: rebalance() once node_id may take
  // partitions (`catena node add`, catenad --join-rebalance).
  [[nodiscard]] Result<idl::RebalancePlan> add_node(const std::string& node_id, bool dry_run)
      EXCLUDES(rebalance_mu_, move_mu_, mu_);
  [[nodiscard]] Result<void> commit_offset(const std::string& group, const std::string& channel,
                                           std::int32_t partition, std::int64_t offset);
  [[nodiscard]] Result<std::int64_t> fetch_offset(const std::string& group, const std::string& channel,
                                                  std::int32_t partition) const;
  // A new producer epoch (and, for producer_id 0, a new id). Numbers are
  // reserved durably in blocks of kProducerBlock, so most calls write nothing.
  // A tenant's call (tenant non-empty) takes one from its
  // max_producer_ids_per_minute first: RESOURCE_EXHAUSTED when it has none.
  [[nodiscard]] Result<idl::ProducerIdentity> init_producer(std::int64_t producer_id,
                                                            const std::string& tenant = {});
  static constexpr std::int64_t kIssuedProducerIdBit = std::int64_t{1} << 62;
  static constexpr std::int64_t kProducerBlock = 1024;

  // One round of maintenance: suspect silent nodes, probe suspects, evict
  // the dead and repair their chains, promote caught-up joining replicas,
  // restore replication, retry pushes.
  void tick() EXCLUDES(tick_mu_, mu_);

  // Where a chain rebuilt after its data was lost starts: the first multiple
  // of kOffsetGeneration above the partition's high-water mark. The mark
  // comes from heartbeats, so it lags the chain by up to one heartbeat plus
  // one lease; records acknowledged in that window were lost with every
  // copy, and their offsets must not be handed out again either. No chain
  // appends 2^32 records in a fraction of a second, so a new offset
  // generation is above all of them.
  static constexpr std::int64_t kOffsetGeneration = std::int64_t{1} << 32;
  [[nodiscard]] static std::int64_t rebuilt_start_offset(std::int64_t high_water);

  // --- subscriber groups (controller_groups.cpp; see catena.thrift) ---
  [[nodiscard]] Result<idl::GroupAssignment> join_group(const std::string& group, const std::string& channel,
                                                        const std::string& member_name,
                                                        const std::vector<std::int32_t>& owned);
  [[nodiscard]] Result<idl::GroupAssignment> group_heartbeat(const std::string& group,
                                                             const std::string& member_id,
                                                             const std::vector<std::int32_t>& released);
  [[nodiscard]] Result<void> leave_group(const std::string& group, const std::string& member_id);
  [[nodiscard]] Result<void> commit_offsets(const std::string& group, const std::string& channel,
                                            const std::string& member_id, std::int64_t generation,
                                            const std::vector<idl::PartitionOffset>& offsets);
  [[nodiscard]] Result<std::vector<std::string>> list_groups() const;
  [[nodiscard]] Result<idl::GroupStatus> describe_group(const std::string& group) const;
  // The latest assignment changes and whom each told (tests, diagnostics).
  [[nodiscard]] std::vector<GroupCoordinator::Change> group_changes() const;
  // Offset commit calls waiting for the metadata store now (tests, diagnostics).
  [[nodiscard]] int offset_commits_waiting() const;

  // --- tenants (controller_tenants.cpp; see catena.thrift, tenants.hpp) ---
  // The new tenant's token (shown once; only its SHA-256 is stored).
  [[nodiscard]] Result<std::string> create_tenant(const std::string& name, const idl::TenantQuotas& quotas);
  [[nodiscard]] Result<std::vector<idl::TenantInfo>> list_tenants() const;
  // INVALID_ARGUMENT while its namespace holds a channel.
  [[nodiscard]] Result<void> delete_tenant(const std::string& name);
  [[nodiscard]] Result<std::string> rotate_tenant_token(const std::string& name);
  [[nodiscard]] Result<void> alter_tenant(const std::string& name, const idl::TenantQuotas& quotas);
  // The tenant whose token has this SHA-256; UNAUTHENTICATED if none.
  [[nodiscard]] Result<std::string> tenant_of_token(const std::string& token_sha256) const;
  // UNAUTHENTICATED unless tenant exists and its token still has this
  // SHA-256 (it was neither deleted nor given a new token).
  [[nodiscard]] Result<void> check_tenant(const std::string& tenant, const std::string& token_sha256) const;

  [[nodiscard]] bool halted() const;
  [[nodiscard]] const ControllerCounters& counters() const noexcept { return *counters_; }
  // Copy of the durable state, for tests and diagnostics.
  [[nodiscard]] meta::MetaState metadata() const;
  // Whether the metadata store failed for good (MetadataStore::failed()):
  // this Controller can commit nothing more and must stop leading. Any
  // thread, without the controller's lock.
  [[nodiscard]] bool metadata_failed() const noexcept;

 private:
  [[nodiscard]] Result<idl::RebalancePlan> rebalance(bool dry_run, RebalanceScope scope)
      EXCLUDES(rebalance_mu_, move_mu_, mu_);
  using RouteId = std::pair<std::string, std::int32_t>;
  struct AckState {
    std::int64_t epoch = 0;
    std::set<std::string> nodes;
    // The newest epoch each node confirmed, kept across epochs: a node that
    // holds only sealed ranges and confirmed a route newer than all of them
    // knows them as sealed, and is not pushed every later route.
    std::map<std::string, std::int64_t> newest;
  };
  struct Backoff {
    Clock::time_point next_attempt;
    Clock::duration delay{};
  };
  struct PushJob {
    BrokerTarget to;
    idl::ChainAssignment assignment;
  };
  struct FenceJob {
    BrokerTarget to;
    std::string channel;
    std::int32_t partition = 0;
    std::int64_t epoch = 0;
  };
  // A node that registered again holding a replica of a short chain it is
  // no longer in (controller_rejoin.cpp).
  struct Rejoiner {
    std::string node_id;
    std::int64_t node_epoch = 0;
    std::int64_t end_offset = 0;  // what it said it holds
  };

  Controller(Options options, const Clock& clock, BrokerAdminClient& brokers,
             std::unique_ptr<MetadataStore> store);

  // --- tenants (controller_tenants.cpp) ---
  struct TenantUse {
    std::int64_t channels = 0;
    std::int64_t partitions = 0;
    std::int64_t groups = 0;
    std::int64_t segment_bytes = 0;  // sum of replication x segment_bytes over its partitions
  };
  [[nodiscard]] TenantUse tenant_use_locked(const std::string& tenant) const REQUIRES(mu_);
  // RESOURCE_EXHAUSTED if adding these to the namespace that holds `name`
  // (a channel or group) takes its tenant past a quota; fine when no tenant
  // owns that namespace.
  [[nodiscard]] Result<void> check_quota_locked(const std::string& name, std::int64_t add_channels,
                                                std::int64_t add_partitions, std::int64_t add_groups,
                                                std::int64_t add_segment_bytes = 0) const REQUIRES(mu_);
  // Whether group has members or committed offsets.
  [[nodiscard]] bool group_known_locked(const std::string& group) const REQUIRES(mu_);
  // Whether a replica of `channel` may be placed on node_id: its tenant's
  // zones (TenantQuotas.zones) hold the node's zone, or it has none.
  [[nodiscard]] bool placement_allowed_locked(const std::string& channel, const std::string& node_id) const
      REQUIRES(mu_);
  // candidates_locked() without the nodes placement_allowed_locked refuses.
  [[nodiscard]] std::vector<PlacementCandidate> candidates_for_locked(const std::string& channel) const
      REQUIRES(mu_);
  // The nodes a replica of `channel` may not be placed on (for
  // Placement::choose's exclusions).
  [[nodiscard]] std::set<std::string> placement_refused_locked(const std::string& channel) const
      REQUIRES(mu_);

  // --- all *_locked functions require mu_ (checked by Clang: REQUIRES) ---
  [[nodiscard]] Result<void> check_running_locked() const REQUIRES(mu_);
  // Where and how to reach a node's BrokerAdmin server: its address, its
  // admin secret (derived from the link key and the node id) and this
  // controller's epoch (BrokerAdmin.authenticate).
  [[nodiscard]] BrokerTarget broker_target_locked(const std::string& node_id,
                                                  const std::string& admin_addr) const REQUIRES(mu_);
  [[nodiscard]] std::string admin_secret_locked(const std::string& node_id) const REQUIRES(mu_);
  // Forgets the push confirmations of every partition of the tenant: each
  // node holding any of them is pushed again (a new access secret or new
  // limits). Returns the partitions.
  std::size_t push_tenant_again_locked(const std::string& tenant) REQUIRES(mu_);
  // What an assignment of the channel's partitions carries of its tenant
  // (ChainAssignment.tenant); nullopt outside every tenant's namespace.
  [[nodiscard]] std::optional<idl::TenantNodeLimits> tenant_limits_locked(const std::string& channel) const
      REQUIRES(mu_);
  [[nodiscard]] std::string access_secret_locked(const std::string& channel, std::int32_t partition) const
      REQUIRES(mu_);
  bool crash_locked(std::string_view point) REQUIRES(mu_);
  [[nodiscard]] const meta::NodeRecord* node_locked(const std::string& node_id) const REQUIRES(mu_);
  [[nodiscard]] Result<const meta::ChannelRecord*> channel_locked(const std::string& name) const
      REQUIRES(mu_);
  [[nodiscard]] Result<const idl::PartitionRoute*> route_locked(const std::string& channel,
                                                                std::int32_t partition) const REQUIRES(mu_);
  [[nodiscard]] std::map<std::string, std::int64_t> replica_counts_locked() const REQUIRES(mu_);
  // ALIVE nodes and their load.
  [[nodiscard]] std::vector<PlacementCandidate> candidates_locked() const REQUIRES(mu_);
  [[nodiscard]] bool in_any_route_locked(const std::string& node_id) const REQUIRES(mu_);
  // Every member of the route, joining ones included, acknowledged its epoch.
  [[nodiscard]] bool fully_acked_locked(const idl::PartitionRoute& route) const REQUIRES(mu_);
  // The tail's last report, at the route's epoch, says joining[0] is synced:
  // the tail counts it in its commit, and it holds every committed record.
  [[nodiscard]] bool caught_up_locked(const idl::PartitionRoute& route) const REQUIRES(mu_);
  [[nodiscard]] std::string assign_node_id_locked(std::int64_t* next_seq) const REQUIRES(mu_);
  // A new chain for partition p of a channel with this config (epoch 1,
  // offset 0), placed on ALIVE nodes by load and zone; placement counts it
  // for the next one.
  [[nodiscard]] Result<idl::PartitionRoute> place_route_locked(Placement& placement,
                                                               const idl::ChannelConfig& config,
                                                               std::int32_t p) REQUIRES(mu_);
  // Waits until no push of the channel's routes is in flight (a tick may
  // have claimed some that run_pushes() then skipped).
  void await_channel_pushes(const std::string& channel) EXCLUDES(mu_);

  // --- channel alters (controller_rescale.cpp) ---
  // Appends and commits the missing markers of the channel's open
  // generation, recording each; the last one completes it. An alter call
  // polls each head until its marker is committed (up to
  // marker_commit_timeout); tick() asks each head once and leaves a marker
  // not yet committed to its next round, so that it never holds up repairs
  // (the repair may be what the commit waits for).
  enum class MarkerWait : std::uint8_t { until_committed, once };
  [[nodiscard]] Result<void> write_markers(const std::string& name, MarkerWait wait) REQUIRES(alter_mu_)
      EXCLUDES(mu_);
  // tick(): finishes alters a failure or a restart left open.
  void resume_alters() EXCLUDES(alter_mu_, mu_);

  // --- drains (controller_drain.cpp) ---
  // The node is DRAINING: it takes no new replicas, and each of its chains
  // gets a joining replacement that takes its place when promoted.
  [[nodiscard]] bool draining_locked(const std::string& node_id) const REQUIRES(mu_);
  [[nodiscard]] std::int64_t wall_ms() const;
  // Sealed ranges whose records expired leave their routes (epoch+1), so a
  // route, and what a move pushes, stops growing with every earlier move.
  void drop_expired_ranges_locked() REQUIRES(mu_);
  // Takes node_id out of route's sealed ranges where another live, serving
  // member holds the range too, or the range expired (an emptied range is
  // dropped). True if the route changed.
  bool leave_sealed_ranges_locked(idl::PartitionRoute& route, const std::string& node_id) const REQUIRES(mu_);
  // Promoting joining[0] of next also takes one DRAINING member out of the
  // chain (and its sealed ranges): the promoted replica holds every
  // committed record, so the chain still holds every acknowledged one.
  void drop_drained_member_locked(idl::PartitionRoute& next) REQUIRES(mu_);
  // Takes DRAINING nodes out of joining lists and shared sealed ranges, and
  // marks those in no route DRAINED.
  void drain_step_locked() REQUIRES(mu_);
  [[nodiscard]] idl::NodeStatus node_status_locked(const meta::NodeRecord& node,
                                                   const std::map<std::string, std::int64_t>& counts) const
      REQUIRES(mu_);

  // Declares node_id DEAD and takes it out of its chains. fence_evicted:
  // also send it best-effort fences (not when its address now belongs to a
  // new incarnation or another node).
  [[nodiscard]] Result<void> evict_locked(const std::string& node_id, const std::string& reason,
                                          bool fence_evicted) REQUIRES(mu_);
  [[nodiscard]] Result<void> remove_from_routes_locked(const meta::RepairIntent& intent, bool fence_evicted)
      REQUIRES(mu_);
  [[nodiscard]] Result<void> finish_removals_locked(const std::string& node_id) REQUIRES(mu_);
  void restore_replication_locked() REQUIRES(mu_);

  // --- rejoining with kept data, the replacement delay (controller_rejoin.cpp) ---
  // Replicas of a route's chain still to add: serving members and joining
  // ones short of the replication (a DRAINING member counts as missing).
  [[nodiscard]] std::int32_t missing_replicas_locked(const idl::PartitionRoute& route,
                                                     std::int32_t replication) const REQUIRES(mu_);
  // At registration, for a held replica of a chain the node is not in: true
  // if it is kept as that chain's rejoin candidate (the chain is short, the
  // node serves), false if it is to be fenced.
  bool keep_for_rejoin_locked(const meta::NodeRecord& node, const idl::PartitionProgress& held) REQUIRES(mu_);
  // Forgets node_id's rejoin candidates (it died or is a new incarnation)
  // and ends the replacement delay of the chains that lost it.
  void forget_rejoiner_locked(const std::string& node_id) REQUIRES(mu_);
  // An evicted chain member: the chain waits for it (replacement_delay) and
  // prefers its zone for a replacement.
  void note_lost_member_locked(const idl::PartitionRoute& route, const std::string& node_id) REQUIRES(mu_);
  // The rejoin candidates restore_replication_locked() adds first to a
  // route missing replicas (at most missing, in registration order). A
  // candidate the chain no longer needs, or that cannot take it, is fenced
  // and dropped.
  [[nodiscard]] std::vector<std::string> take_rejoiners_locked(const idl::PartitionRoute& route,
                                                               std::int32_t missing) REQUIRES(mu_);
  // Drops the rejoin candidates of a chain that is full again (fenced).
  void drop_rejoiners_locked(const idl::PartitionRoute& route) REQUIRES(mu_);
  // Fences a candidate's copy unless it is another incarnation now, or in
  // the chain after all.
  void fence_rejoiner_locked(const idl::PartitionRoute& route, const Rejoiner& candidate, const char* why)
      REQUIRES(mu_);
  // True while the route waits for an evicted member to come back (logged
  // once per route epoch).
  [[nodiscard]] bool awaiting_lost_member_locked(const idl::PartitionRoute& route) REQUIRES(mu_);
  // The zones of the members route lost and the datacenters of the ones it
  // has (Placement's rule 3).
  [[nodiscard]] PlacementPreference preference_for_locked(const idl::PartitionRoute& route) const
      REQUIRES(mu_);
  // Counts where replacements were placed (recoveries_), and warns about
  // those outside the datacenters of the chain.
  void count_replacements_locked(const idl::PartitionRoute& route, const PlacementPreference& prefer,
                                 const std::vector<std::string>& chosen) REQUIRES(mu_);
  // A re-registering node that is still the kept last member of some chains
  // either brings their data back (held) or proves it lost: puts it back at
  // a new epoch, or empties the chain for a rebuild above the high-water
  // mark. Fences what it holds of chains it is no longer in.
  void return_last_members_locked(const meta::NodeRecord& node,
                                  const std::vector<idl::PartitionProgress>& held,
                                  std::vector<idl::PartitionRoute>* changed) REQUIRES(mu_);
  // Raises the in-memory high-water marks from a node's report.
  void note_progress_locked(const idl::NodeStats& stats) REQUIRES(mu_);
  // The store's background commit (one unanswered at a time): takes the
  // answer to the one sent before (confirming or raising again its
  // high-water marks, answering its offset commits), then sends what waits:
  // raised high-water marks (one record a second at most) and queued
  // offset commits, together. Never waits for ZooKeeper.
  void background_commit_locked() REQUIRES(mu_);
  // Subscriber groups' offset commits (controller_groups.cpp): queued under
  // the lock, sent by background_commit_locked(), answered once the store
  // has them; the RPC waits for that with the lock released, so a
  // ZooKeeper that stops answering holds up no heartbeat answer.
  struct OffsetBatch {
    bool done = false;
    Result<void> result;
  };
  struct QueuedOffset {
    std::string group;
    std::string channel;
    std::int32_t partition = 0;
    std::int64_t offset = 0;
    bool exact = false;  // commit_offset's: set as is (may go back), not raised
  };
  [[nodiscard]] Result<void> commit_queued_offsets(UniqueLock& lock, std::vector<QueuedOffset> offsets)
      REQUIRES(mu_);
  void answer_offsets_locked(std::shared_ptr<OffsetBatch>& batch, const Result<void>& result) REQUIRES(mu_);
  [[nodiscard]] std::int64_t high_water_locked(const std::string& channel, std::int32_t partition) const
      REQUIRES(mu_);
  void promote_caught_up_locked() REQUIRES(mu_);
  void close_finished_repairs_locked() REQUIRES(mu_);
  [[nodiscard]] std::vector<PushJob> collect_pushes_locked() REQUIRES(mu_);

  // Partition handoff: gives up the move of (channel, partition) begun at
  // from_epoch: the old chain goes on at a new epoch (which lifts the seal).
  [[nodiscard]] Result<void> abandon_move_locked(const std::string& channel, std::int32_t partition,
                                                 std::int64_t from_epoch, const std::string& why)
      REQUIRES(mu_);

  void run_probes() EXCLUDES(mu_);
  // The detector's verdicts on probes' answers (the ping's, and whether the
  // address refused the connection), and what they lead to (evictions).
  void apply_probe_results(const std::vector<std::pair<FailureDetector::Probe, BrokerTarget>>& probes,
                           std::vector<std::pair<Result<idl::NodeStats>, bool>>& results) EXCLUDES(mu_);
  // Data-plane link faults (Options::link_fault_timeout): records a report
  // from a suspect's predecessor, and evicts where one has persisted.
  void note_link_fault_locked(const idl::FailureReport& report, const idl::PartitionRoute& route)
      REQUIRES(mu_);
  void act_on_link_faults_locked() REQUIRES(mu_);
  // The lease told to brokers (Options::lease resolved).
  [[nodiscard]] std::chrono::milliseconds lease() const;
  // Too many nodes silent at once (Options::isolation_percent); logs on
  // every change of the answer.
  [[nodiscard]] bool isolated_locked() REQUIRES(mu_);
  void run_pushes() EXCLUDES(mu_);
  // Subscriber groups: the committed offsets a member starts from and the
  // alter markers it may read past (controller_groups.cpp).
  void fill_positions_locked(const std::string& group, const std::string& channel,
                             idl::GroupAssignment& assignment) const REQUIRES(mu_);
  // The partitions a group is assigned: the channel's, and those a shrink
  // removed whose records below their last marker it has not all read.
  [[nodiscard]] std::int32_t group_span_locked(const std::string& group, const meta::ChannelRecord& ch) const
      REQUIRES(mu_);
  void groups_tick_locked() REQUIRES(mu_);

  const Options options_;
  const Clock& clock_;
  BrokerAdminClient& brokers_;

  Mutex tick_mu_ ACQUIRED_BEFORE(mu_);  // one tick at a time
  // One rebalance at a time, planned and carried out: a second one (a
  // joining node's, an operator's) plans from what the first left.
  Mutex rebalance_mu_ ACQUIRED_BEFORE(move_mu_);
  Mutex move_mu_ ACQUIRED_BEFORE(mu_);   // one partition move at a time
  Mutex alter_mu_ ACQUIRED_BEFORE(mu_);  // one channel alter at a time
  mutable Mutex mu_;
  // Shared with the store's counting wrapper (controller.cpp), which
  // counts what commits.
  std::shared_ptr<ControllerCounters> counters_ = std::make_shared<ControllerCounters>();
  std::unique_ptr<MetadataStore> store_ PT_GUARDED_BY(mu_);
  // Taken from the store at open: what this controller's BrokerAdmin calls
  // and heartbeat answers carry (brokers refuse older ones). Set once,
  // before any other thread sees the controller.
  std::atomic<std::int64_t> controller_epoch_{0};
  // Thread-safe: heartbeats renew leases through it without mu_ (heartbeat()).
  FailureDetector detector_;
  // From heartbeats and probes (progress too).
  std::map<std::string, idl::NodeStats> stats_ GUARDED_BY(mu_);
  // What heartbeats answered without mu_ reported (node -> its epoch and
  // stats, the latest only), and failure reports that found mu_ held, for
  // the next holder of mu_ to take: the heartbeat itself if mu_ is free,
  // else tick() or the next heartbeat.
  Mutex heartbeats_mu_ ACQUIRED_AFTER(mu_);
  std::map<std::string, std::pair<std::int64_t, idl::NodeStats>> heartbeats_ GUARDED_BY(heartbeats_mu_);
  std::vector<idl::FailureReport> queued_reports_ GUARDED_BY(heartbeats_mu_);
  void take_heartbeats_locked() REQUIRES(mu_) EXCLUDES(heartbeats_mu_);
  [[nodiscard]] Result<void> report_failure_locked(const idl::FailureReport& report) REQUIRES(mu_);
  // True holding mu_: free within kReportWaitsForLock (report_failure).
  [[nodiscard]] bool lock_for_report() TRY_ACQUIRE(true, mu_) EXCLUDES(heartbeats_mu_);
  // A heartbeat's report: stats, progress, strays, push back-off.
  void take_heartbeat_locked(const std::string& node_id, const idl::NodeStats& stats) REQUIRES(mu_);
  std::map<RouteId, AckState> acks_ GUARDED_BY(mu_);                   // who confirmed which route epoch
  std::set<std::pair<std::string, RouteId>> pushing_ GUARDED_BY(mu_);  // (node, route) pushes in flight
  std::condition_variable pushes_done_;                     // run_pushes() took answers off pushing_
  std::map<std::string, Backoff> backoff_ GUARDED_BY(mu_);  // per node push back-off
  std::vector<FenceJob> fences_ GUARDED_BY(mu_);            // best-effort fences of evicted nodes
  // Partitions of deleted channels still to drop on a node (a
  // configureChain naming nobody): retried by run_pushes() until the node
  // answers or is dead (controller_delete.cpp). Those of a delete are also
  // in the metadata (MetaState.pending_drops) until confirmed, and loaded
  // by the next controller that opens it.
  std::vector<PushJob> drops_ GUARDED_BY(mu_);
  void retry_drops() EXCLUDES(mu_);  // from tick(): drops_ to the nodes out of their back-off
  [[nodiscard]] PushJob drop_job_locked(const meta::PendingDrop& drop) REQUIRES(mu_);
  // Takes delivered (or given up) drops out of the metadata; false if that
  // could not be written (they stay owed and are sent again: a drop at an
  // epoch the node holds is a no-op).
  [[nodiscard]] bool forget_drops_locked(const std::vector<PushJob>& done) REQUIRES(mu_);
  // A node reporting a replica of a channel that no longer exists, or older
  // than the channel of that name (first_epoch), is sent the drop it missed
  // (say across a controller restart).
  void drop_strays_locked(const std::string& node_id, const idl::NodeStats& stats) REQUIRES(mu_);
  // Whether a drop is still to be delivered to node_id for the partition: its
  // pushes wait for it (the drop goes first).
  [[nodiscard]] bool drop_pending_locked(const std::string& node_id, const std::string& channel,
                                         std::int32_t partition) const REQUIRES(mu_);
  // Under-replicated, already logged.
  std::set<std::pair<RouteId, std::int64_t>> warned_short_ GUARDED_BY(mu_);
  // What recovery did since this controller opened (ClusterStatus.recoveries).
  idl::RecoveryCounts recoveries_ GUARDED_BY(mu_);
  // Per chain, the nodes that may rejoin it with the data they kept; they
  // join first (in memory: a controller restart forgets them, and their
  // copies are left until the node registers again, which fences them).
  std::map<RouteId, std::vector<Rejoiner>> rejoiners_ GUARDED_BY(mu_);
  // Members evicted from a chain not yet restored: its zone is preferred
  // for the replacement, and until `until` the chain waits for the node.
  struct LostMember {
    std::string node_id;
    std::string zone;
    Clock::time_point until;
  };
  std::map<RouteId, std::vector<LostMember>> lost_members_ GUARDED_BY(mu_);
  // Waiting for an evicted member, already logged.
  std::set<std::pair<RouteId, std::int64_t>> warned_waiting_ GUARDED_BY(mu_);
  std::map<RouteId, std::int64_t> raised_high_water_ GUARDED_BY(mu_);  // reported, not yet persisted
  // Sent in a background commit whose answer has not come: raised again
  // if it was not applied.
  std::map<RouteId, std::int64_t> unconfirmed_high_water_ GUARDED_BY(mu_);
  Clock::time_point next_high_water_persist_ GUARDED_BY(mu_);
  using OffsetKey = std::tuple<std::string, std::string, std::int32_t>;  // group, channel, partition
  // Offset commits waiting for the next background commit, and the batch
  // their callers wait on; then those in the background commit in flight.
  std::map<OffsetKey, std::int64_t> queued_offsets_ GUARDED_BY(mu_);
  std::shared_ptr<OffsetBatch> queued_offsets_batch_ GUARDED_BY(mu_);
  std::map<OffsetKey, std::int64_t> sent_offsets_ GUARDED_BY(mu_);
  std::shared_ptr<OffsetBatch> sent_offsets_batch_ GUARDED_BY(mu_);
  std::condition_variable offsets_answered_;
  int offset_commit_waiters_ GUARDED_BY(mu_) = 0;  // commit RPCs waiting for their batch now
  struct LinkFault {
    std::string reporter;
    std::int64_t epoch = 0;
    Clock::time_point first{}, last{};
    int reports = 0;
    std::string reason;  // the latest report's
  };
  // (route, suspect): ongoing reports.
  std::map<std::pair<RouteId, std::string>, LinkFault> link_faults_ GUARDED_BY(mu_);
  // Reporter: when its reports last evicted a node.
  std::map<std::string, Clock::time_point> link_evictions_ GUARDED_BY(mu_);
  // Set under mu_; read without it by heartbeat()'s renewal.
  std::atomic<bool> halted_{false};
  // Below store_->state().producer_numbers_reserved.
  std::int64_t next_producer_number_ GUARDED_BY(mu_) = 0;
  // Tenant -> its max_producer_ids_per_minute bucket (in this leader's
  // memory: a restart or a new leader starts every bucket full).
  struct ProducerIdBucket {
    double tokens = 0;
    Clock::time_point refilled{};
  };
  std::map<std::string, ProducerIdBucket> producer_id_buckets_ GUARDED_BY(mu_);
  [[nodiscard]] Result<void> take_producer_id_locked(const std::string& tenant) REQUIRES(mu_);
  bool isolated_ GUARDED_BY(mu_) = false;  // last answer of isolated_locked()
  GroupCoordinator groups_ GUARDED_BY(mu_);
  // Push and probe rounds' BrokerAdmin calls (Options::broker_rpc_threads).
  // Last: destroyed first, while what its tasks use still exists.
  std::unique_ptr<RpcPool> rpc_pool_;
};

}  // namespace catena::control
