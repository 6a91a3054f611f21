// Catena control-plane wire protocol.
//
// Two services share these types:
//   Controller   - served by catena-controller; called by brokers (register,
//                  heartbeat), clients and the CLI (routes, channels, status)
//                  and anyone who sees a peer fail (reportFailure).
//   BrokerAdmin  - served by every catenad; called only by the controller to
//                  install chain configurations and to probe liveness.
//
// Transport: both services use TFramedTransport + TBinaryProtocol (strict
// read and write) over TCP. A server must refuse frames above 16 MiB.
//
// Epochs: the controller is the only authority that creates epochs.
//   * node_epoch   - a cluster-wide counter; every registerNode hands out a
//                    new one. A node whose node_epoch was retired (declared
//                    DEAD, or superseded by a re-registration) is fenced.
//   * route epoch  - per (channel, partition); starts at 1 and grows by one
//                    with every change of the chain. A request that names an
//                    older epoch than the receiver's is refused with
//                    STALE_EPOCH and, where the receiver knows it, the
//                    current route.

namespace cpp catena.control.idl

enum ErrorCode {
  OK = 0,
  UNKNOWN_CHANNEL = 1,     // no channel by that name
  CHANNEL_EXISTS = 2,
  INVALID_ARGUMENT = 3,    // message says which field and why
  STALE_EPOCH = 4,         // current_route carries what the receiver knows
  NOT_ENOUGH_NODES = 5,    // fewer ALIVE nodes than the replication factor
  UNKNOWN_NODE = 6,        // node_id never registered: call registerNode
  FENCED = 7,              // caller's node_epoch was retired: re-register
  NOT_LEADER = 8,          // this controller is not the leader (leader_address says who is) or was fenced
  NOT_HEAD = 9,            // a publish reached a replica that is not the head
  INTERNAL = 10,
  UNAVAILABLE = 11,        // a peer (broker or controller) could not be reached
  NO_OFFSET = 12,          // the group never committed an offset for that partition
  UNKNOWN_MEMBER = 13,     // subscriber groups: no such member (expired, left, or the controller restarted): join again
  NOT_OWNER = 14,          // subscriber groups: the partition is not the member's (at that generation): it lost it
  // Tenants (the controller has an admin token): the connection has not
  // called authenticate with a valid token.
  UNAUTHENTICATED = 15,
  // Tenants: the caller's identity may not make this call, or not on this
  // name (a channel or group outside its namespace).
  PERMISSION_DENIED = 16,
  // Tenants: the call would take the tenant past a quota (the message names
  // it, its limit and the current use); nothing changed.
  RESOURCE_EXHAUSTED = 17,
}

// One replica of a chain: enough for a client or a neighbour to reach it.
//
// node_epoch names the incarnation of the node that holds this replica (its
// registration). A broker refuses an assignment that names another
// incarnation of itself (FENCED), and a replica link is accepted only from
// the incarnation the route names: a restarted, empty process with the same
// node id and address never takes its predecessor's role back.
struct Replica {
  1: string node_id,
  2: string fabric_addr,
  3: string admin_addr,
  4: i64 node_epoch = 0,
}

// [start_offset, end_offset) of a partition, as the chain that wrote it at
// route epoch `epoch` holds it: read-only, served to subscribers who name
// that epoch in their hello, and `moved` once they reach end_offset.
struct SealedRange {
  1: i64 start_offset,
  2: i64 end_offset,
  3: i64 epoch,
  4: list<Replica> replicas,
  5: i64 sealed_at_ms,        // the controller's wall clock when the range was sealed
}

// The chain of one partition at one epoch. replicas[0] is the head (takes
// appends), replicas[last] the tail (commits, serves the commit offset).
//
// joining: replacement replicas being caught up behind the tail, in chain
// order (the tail forwards to joining[0], joining[0] to joining[1], ...).
// They copy every retained segment and every new write while the chain keeps
// committing without them; they hold no client-visible role (no commits, no
// reads, no acknowledgements) until the controller promotes joining[0] to
// tail with a new epoch. Clients use `replicas` only. Absent in metadata
// written before it existed (decodes as empty).
//
// sealed: the partition's earlier offset ranges, oldest first, each written
// by a chain that was sealed when the partition moved on (tail-offset
// handoff: `catena partition move`). The chain in `replicas` serves
// [start_offset, ...); sealed[i] serves [sealed[i].start_offset,
// sealed[i].end_offset) read-only, from its own replicas, until the range's
// records expire (ttl after sealed_at_ms), when the controller drops it.
// Absent in metadata written before it existed (decodes as empty).
struct PartitionRoute {
  1: string channel,
  2: i32 partition,
  3: i64 epoch,
  4: list<Replica> replicas,
  5: i64 start_offset,
  6: list<Replica> joining,
  7: list<SealedRange> sealed,
  // 16 bytes every client hello to this partition's replicas must carry
  // (publisher, subscriber, commit watch): the controller derives them from
  // its link key and the partition, and hands them with the route to those
  // who may use the channel. Set in answers (getRoute, describeChannel,
  // listChannels, createChannel, alterChannel, ...), never stored.
  8: optional binary access_secret,
}

exception CatenaError {
  1: ErrorCode code,
  2: string message,
  3: optional PartitionRoute current_route,
  // NOT_LEADER from a controller that follows: the leader's Thrift address
  // (absent while no leader is known).
  4: optional string leader_address,
}

struct NodeInfo {
  1: string node_id,       // [A-Za-z0-9._-]{1,128}; empty on first registration: the controller assigns "node-N"
  2: string admin_addr,    // host:port of this node's BrokerAdmin server
  3: string fabric_addr,   // data-plane address, opaque to the controller (1..64 characters)
  4: string zone,
  5: string datacenter,
}

// Limits: chain/include/catena/chain/limits.hpp (shared with the data plane).
struct ChannelConfig {
  1: string name,                       // [A-Za-z0-9._-]{1,128}
  2: i32 partitions = 1,                // 1..1024
  3: i32 replication = 3,               // 1..7 (chain length R)
  4: i64 segment_bytes = 67108864,      // 4 KiB..512 MiB, a multiple of 4096
  5: i64 ttl_ms = 3600000,              // 1000..10^12 (alterRetention changes it)
}

// One key -> partition mapping of a channel (`catena channel alter`): a
// keyed record goes to partition xxh64(key) % partitions. Generation 0 is
// the channel as created. A newer generation is brought in by markers: one
// record in every partition whose key set changes, at a cut. In such a
// partition, records below its marker were written under the older
// generations, records above it under this one or newer; publishers send a
// key to its new partition only after every record they sent it to the old
// one is stored below the old one's marker, and subscribers deliver a
// partition's records above its marker only once every parent (a partition
// from which some key moves into it) has been delivered up to its own.
struct ChannelGeneration {
  1: i32 generation,
  2: i32 partitions,
  // partition -> offset of its marker for this generation; -1 while the
  // marker has not been appended and committed. The keys are the affected
  // partitions: old and new ones whose key set changes.
  3: map<i32, i64> markers,
  // Every marker committed: publishers map keys by this generation, and
  // ChannelConfig.partitions is its count.
  4: bool complete,
  // Set when complete: the nodes the controller called for this change
  // (affected heads, replicas of added partitions) and the calls it made
  // in the round that completed it (appendMarker, configureChain of added
  // chains). Clients are told nothing: they meet the markers in the data.
  5: i32 nodes_told,
  6: i32 control_messages,
}

struct ChannelInfo {
  1: ChannelConfig config,
  // index == partition. After a shrink, partitions at or above
  // config.partitions take no new records; they keep their routes while a
  // subscriber may still need their records below the marker.
  2: list<PartitionRoute> routes,
  // Oldest first; empty for a channel never altered (generation 0 of
  // config.partitions). The last one may be incomplete (an alter under way).
  3: list<ChannelGeneration> generations,
}

// A publisher's identity, issued by the controller (as Kafka's
// InitProducerId): every call hands out a producer_epoch newer than any
// issued before, for any id, so a restarted publisher's new records are
// never taken for retries of its old ones, and an older incarnation that is
// still running is fenced (producer_fenced) once the new one publishes.
struct ProducerIdentity {
  1: i64 producer_id,
  2: i64 producer_epoch,
}

// Idempotent-producer state a sealed head hands to the next chain's head:
// per producer its epoch, last sequence, and the offsets of its recent
// sequences as runs (consecutive sequences at consecutive offsets).
struct ProducerRun {
  1: i64 first_seq,
  2: i64 first_offset,
  3: i32 count,
}
struct ProducerSnapshot {
  1: i64 producer_id,
  2: i64 producer_epoch,
  3: i64 last_seq,             // -1: none stored at this epoch
  4: list<ProducerRun> runs,
}

struct RegisterReply {
  1: string node_id,
  2: i64 node_epoch,
  3: i32 heartbeat_interval_ms,
  // The node may acknowledge publishers and serve subscribers only until
  // lease_ms after it SENT its last heartbeat that was answered fenced=false
  // (registration counts as one). The controller never acts on a node's
  // silence before its lease has lapsed. 0: no lease (older controllers).
  4: i32 lease_ms,
  // The node's BrokerAdmin credential: from now on its BrokerAdmin server
  // answers only connections that called authenticate with this secret
  // (HMAC of the cluster's link key and the node id: every controller of
  // the cluster derives the same one). Unset: an older controller, and the
  // server stays open.
  5: optional binary admin_secret,
  // The controller epoch of the controller that answered (see
  // BrokerAdmin.authenticate).
  6: optional i64 controller_epoch,
}

// One replica's progress in one partition, as its node last saw it.
struct PartitionProgress {
  1: string channel,
  2: i32 partition,
  3: i64 epoch,                          // the route epoch the replica is at
  4: i64 end_offset,                     // first offset it does not hold
  5: i64 commit_offset,
  // Bytes it holds that its successor does not have yet (not yet written,
  // or written and not yet completed); -1: no link to a successor.
  6: i64 successor_backlog_bytes = -1,
  // A tail only: it counts its joining successor in its commit, and the
  // successor holds every record the tail committed (it may be promoted).
  7: bool successor_synced = false,
  // Bytes this replica wrote to successors since it was created (what a
  // joining successor's copy cost shows here, at its predecessor).
  8: i64 forwarded_bytes = 0,
  // What it recovered from kept memory when its process started again
  // (catenad --keep-dir): 0 if nothing.
  9: i64 recovered_records = 0,
  10: i64 recovered_bytes = 0,
}

// How long traced records took from their publish (the publisher's wall
// clock) until they reached one chain position on a node: appended at the
// head (position 0), received k hops down (position k). Percentiles are
// bucket edges, within 6%.
struct StageLatency {
  1: i32 position,
  2: i64 count,
  3: i64 p50_ns,
  4: i64 p99_ns,
  5: i64 p999_ns,
  6: i64 max_ns,
}

struct NodeStats {
  1: i64 segments,
  2: i64 bytes,
  3: i64 connections,
  // Every replica the node holds. The controller promotes a joining replica
  // once the tail reports a small backlog towards it.
  4: optional list<PartitionProgress> partitions,
  // Bytes of replica memory the node zeroed since it started, as replicas
  // stopped being its own (fenced, left out of a chain, ranges let go).
  5: optional i64 zeroed_bytes,
  // Partition-level recovery: successor links this node rebuilt in place
  // (same route epoch, no controller involved) since it started.
  6: optional i64 link_rebuilds,
  // Bytes of fabric memory the node has registered (segments, rings, link
  // buffers: every region its provider still holds).
  7: optional i64 registered_bytes,
  // Of those, the segments' (taken as segments open, given back as they
  // expire: what the node retains, in whole segments).
  8: optional i64 segment_memory_bytes,
  // Traced records' latency from publish to each chain position a replica
  // of this node holds (PublisherOptions::trace_stages), since it started.
  9: optional list<StageLatency> stage_latency,
  // Memory given back that the node's provider keeps ready for the next
  // segment (zeroed; on verbs still registered): resident beside
  // registered_bytes, at most the provider's warm=<MiB>.
  10: optional i64 warm_bytes,
}

struct HeartbeatRequest {
  1: string node_id,
  2: i64 node_epoch,
  3: NodeStats stats,
}

struct HeartbeatReply {
  // true: this node_epoch is retired. The node must stop acting on every
  // chain role it holds (its lease is not renewed), keep the replicas' data,
  // and call registerNode again listing them in `held`; the controller puts
  // back the ones it is the last copy of and fences the others.
  // false: the lease is renewed from when this heartbeat was sent.
  1: bool fenced,
  // The answering controller's epoch. A node that has heard of a newer
  // epoch takes nothing from this reply (a deposed leader cannot renew a
  // lease), and a newer one fences every older controller from then on.
  2: optional i64 controller_epoch,
}

struct FailureReport {
  1: string reporter,          // node id or client name, for the log
  2: string suspect_node_id,
  3: string channel,           // empty if the report is not about one chain
  4: i32 partition,
  5: i64 epoch,                // the route epoch the reporter was using
  6: string reason,
}

enum NodeState {
  ALIVE = 1,
  SUSPECT = 2,                 // missed heartbeats or reported; being probed
  DEAD = 3,                    // fenced and removed from every chain
}

// Whether a node takes partitions (`catena node drain`). Independent of
// NodeState: a DRAINING node is ALIVE while its replicas are replaced.
enum DrainState {
  SERVING = 0,                 // takes new partitions
  DRAINING = 1,                // takes none; each of its replicas is being replaced
  DRAINED = 2,                 // in no route: it can be stopped with nothing lost
}

struct NodeStatus {
  1: NodeInfo info,
  2: NodeState state,
  3: i64 node_epoch,
  4: i64 last_heartbeat_ms_ago,
  5: NodeStats stats,
  6: i32 replicas,             // chain memberships held by this node (joining ones included)
  7: DrainState drain = DrainState.SERVING,
  8: i32 sealed_ranges,        // sealed ranges (partition handoff) that name this node
}

// One step of a rebalance plan: movePartition(channel, partition, to),
// replacing the chain `current` with `to`.
struct PlannedMove {
  1: string channel,
  2: i32 partition,
  3: list<string> current,     // the chain now, head first
  4: list<string> to,
  5: string reason,            // which load it evens out, for people
  6: string error,             // rebalance (not dry run): empty when the move was made
}

struct RebalancePlan {
  1: list<PlannedMove> moves,
  2: bool dry_run,
}

// What the controller's recovery levels did since this controller started
// leading (README "Recovery levels"; the partition level is each node's
// NodeStats.link_rebuilds, the datacenter level the mirrors').
struct RecoveryCounts {
  1: i64 since_ms,                      // wall clock of this leader's start
  // Process level: a restarted node took a chain role back with the data
  // it kept (it copies only what it lacks).
  2: i64 kept_data_rejoins,
  // Replacements placed for lost members: in the lost member's zone, in
  // another zone of the chain's datacenter (zone level), in another
  // datacenter (nothing left in the chain's).
  3: i64 replaced_in_lost_zone,
  4: i64 replaced_in_other_zone,
  5: i64 replaced_in_other_datacenter,
}

struct ClusterStatus {
  1: list<NodeStatus> nodes,
  2: i32 repairs_in_progress,
  3: optional RecoveryCounts recoveries,
}

// --- Subscriber groups (controller_groups.hpp) ---

// One partition's position in a batch commit.
struct PartitionOffset {
  1: i32 partition,
  2: i64 offset,
}

// What a group member is told on joinGroup and every groupHeartbeat.
struct GroupAssignment {
  1: string member_id,
  2: i64 generation,             // the group's; grows with every assignment change
  3: list<i32> partitions,       // the member's, to consume (revoking ones excluded)
  4: list<i32> revoke,           // the member's still, to stop: commit, then report released
  // partition -> committed offset, for every partition in `partitions` the
  // group has one for (where a newly assigned partition starts).
  5: map<i32, i64> start_offsets,
  6: i64 session_timeout_ms,     // silence after which the member is dropped
  7: i64 heartbeat_interval_ms,
  // partition -> the generation at which the member got it: a commit must
  // name at least this one.
  8: map<i32, i64> assigned_at,
  // partition -> the newest channel generation (ChannelGeneration) whose
  // marker the member may read past in that partition, for every partition
  // in `partitions`: each parent partition of that alter (a partition from
  // which keys moved into this one) has a committed offset at or past its
  // own marker, so the group has delivered those keys' earlier records. A
  // member stops a partition at a marker of a newer generation, and
  // commits the marker's offset, until an assignment raises this.
  9: map<i32, i64> markers_released,
}

struct GroupMemberStatus {
  1: string member_id,
  2: string name,
  3: list<i32> partitions,
  4: list<i32> revoking,
  5: i64 last_heard_ms_ago,
}

struct GroupPartitionStatus {
  1: i32 partition,
  2: string owner,               // member id; empty while unassigned
  3: string moving_to,           // member id it moves to once revoked; empty if none
  4: i64 committed,              // -1: nothing committed
  5: i64 end_offset,             // the partition's high-water mark as the controller knows it
  6: i64 lag,                    // end_offset - committed (committed -1 counts as 0)
}

struct GroupStatus {
  1: string group,
  2: string channel,             // empty for a group with offsets only (no members now)
  3: i64 generation,
  4: list<GroupMemberStatus> members,
  5: list<GroupPartitionStatus> partitions,
}

// --- Tenants ---

// A tenant's limits; -1: unlimited. Counted over the channels and groups
// of its namespace (names that start with "<tenant>.").
struct TenantQuotas {
  1: i64 max_channels = -1,
  2: i64 max_partitions = -1,    // sum of config.partitions over its channels
  3: i64 max_groups = -1,        // groups with members or committed offsets
  // Where its data may be: the zones (NodeInfo.zone) its channels' replicas
  // are placed in, when created, altered, repaired, drained, moved or
  // rebalanced; a chain stays short rather than leave them. Empty: any.
  4: list<string> zones,
  // Registered memory: the sum over its partitions of replication x
  // segment_bytes, i.e. what one segment slot of every replica takes. Each
  // node keeps `--segment-slots` slots per replica (8 by default), so its
  // channels hold at most that many times this in the cluster's memory.
  // An alter under way counts at the larger of its two sizes.
  5: i64 max_segment_bytes = -1,
  // Per node (each broker enforces its own, as Kafka's produce quotas are
  // per broker): the publisher staging rings its sessions may pin there at
  // once (a hello beyond it is refused resource_exhausted) ...
  6: i64 max_publisher_ring_bytes = -1,
  // ... and the bytes per second its publishers may append there (heads
  // hold the excess back in the publishers' rings: back-pressure for this
  // tenant only). At least 4096 when set.
  7: i64 max_publish_bytes_per_sec = -1,
  // ... and the client sessions (publishers, subscribers, commit watches)
  // its clients may hold there at once (beyond it: resource_exhausted).
  8: i64 max_sessions = -1,
  // Cluster-wide: the initProducer calls (a new producer id, or a new epoch
  // for one) its clients may make per minute, as Kafka's producer-id quota
  // (KIP-936): each one takes a number the controller keeps durably, so a
  // tenant that loops on it cannot grow the metadata or slow the others. A
  // token bucket in the leading controller's memory holding a minute's
  // worth, refilled continuously (a new leader starts it full). Beyond it:
  // RESOURCE_EXHAUSTED, saying when the next one is due.
  9: i64 max_producer_ids_per_minute = -1,
}

struct TenantInfo {
  1: string name,
  2: TenantQuotas quotas,
  3: i64 channels,               // current use
  4: i64 partitions,
  5: i64 groups,
  6: i64 created_at_ms,
  7: i64 segment_bytes,          // use of max_segment_bytes
}

// Who a connection is, once authenticated.
struct Identity {
  1: bool admin,
  2: string tenant,              // empty for the admin
}

service Controller {
  // Registers (or re-registers) a node. Every call returns a new node_epoch;
  // an earlier incarnation of the same node_id is retired and removed from
  // the chains that have other members.
  //
  // held: the replicas this process still holds (its node was fenced, it
  // kept their data and registers again); empty for a process that has just
  // started, which holds nothing. A chain is never shrunk below one member:
  // its last member stays in the route while unreachable (the partition is
  // unavailable). When that node registers again holding the partition, it
  // is put back as the chain with its data (new route epoch); registering
  // without it proves the data lost, and the chain is rebuilt on live
  // nodes starting at the next multiple of 2^32 above the partition's
  // high-water mark (the highest offset any replica ever reported), never
  // at an offset already used. Replicas held that are no longer the node's
  // are fenced.
  RegisterReply registerNode(1: NodeInfo info, 2: list<PartitionProgress> held)
      throws (1: CatenaError err),

  // fenced=true if node_epoch is not the node's current one. UNKNOWN_NODE if
  // the id was never registered.
  HeartbeatReply heartbeat(1: HeartbeatRequest req) throws (1: CatenaError err),

  // Places every partition's chain (epoch 1, start_offset 0), persists it and
  // pushes configureChain to the replicas before returning.
  ChannelInfo createChannel(1: ChannelConfig config) throws (1: CatenaError err),

  list<ChannelInfo> listChannels() throws (1: CatenaError err),
  ChannelInfo describeChannel(1: string name) throws (1: CatenaError err),

  // The current route. known_epoch is the caller's epoch (0 if none); a
  // known_epoch newer than the controller's is INVALID_ARGUMENT.
  PartitionRoute getRoute(1: string channel, 2: i32 partition, 3: i64 known_epoch)
      throws (1: CatenaError err),

  // Asks the controller to verify suspect_node_id by probing it. It is only
  // evicted if the controller cannot reach it either. If channel is set and
  // epoch is older than the route's, STALE_EPOCH with current_route: the
  // chain has already been reconfigured, go there.
  void reportFailure(1: FailureReport report) throws (1: CatenaError err),

  // An operator's decision: the partition's remaining replicas are gone for
  // good (every node still in its chain is DEAD: the kept last member of
  // registerNode above, which will never come back). Empties the chain; it
  // is rebuilt above every offset ever handed out, and clients are told
  // which offsets were lost (data_lost). INVALID_ARGUMENT, changing nothing,
  // while any member of the chain is not DEAD. Returns the emptied route.
  PartitionRoute declarePartitionLost(1: string channel, 2: i32 partition) throws (1: CatenaError err),

  // Tail-offset handoff: moves the partition's write path to a new chain on
  // `to` (node ids, head first; 1..7 ALIVE nodes, distinct) without copying
  // a byte of its history. The current head is sealed (publishers are
  // answered `moved`); once everything it stored is committed, at offset H,
  // one metadata record makes the new chain serve [H, ...) with the old
  // head's producer state, and the old chain a sealed range [start, H)
  // that serves subscribers until it expires. Returns the new route.
  // INVALID_ARGUMENT for bad targets; UNAVAILABLE (nothing changed; the
  // seal lifted at a new epoch) if the old head could not be sealed or did
  // not commit in time, or the chain changed meanwhile (a repair): retry.
  PartitionRoute movePartition(1: string channel, 2: i32 partition, 3: list<string> to)
      throws (1: CatenaError err),

  ClusterStatus clusterStatus() throws (1: CatenaError err),

  // Empties node_id so that it can be stopped with nothing lost. Returns at
  // once (the node's status, DRAINING); tick() does the work and the node
  // is DRAINED once it is in no route (clusterStatus shows the progress).
  // For each chain it is in, a replacement joins behind the tail, copies
  // while the chain keeps committing, and when the tail reports it synced
  // one route change makes it the tail and takes node_id out of the chain
  // (head, middle or tail: the others re-link as after a failure; publishers
  // of a drained head follow the new route). node_id leaves the sealed
  // ranges it shares with a live member; while it holds the only live copy
  // of a range whose records have not expired, the drain is refused.
  // A DRAINING node takes no new replicas; one that registers again stays
  // DRAINING, a DRAINED one that registers again serves again.
  // UNKNOWN_NODE; INVALID_ARGUMENT if it is DEAD, already draining or
  // drained, or holds the only copy of a retained sealed range;
  // NOT_ENOUGH_NODES if some chain of it would have no replacement, or would
  // lose its zone spread (node_id is the last node of a zone it uses).
  NodeStatus drainNode(1: string node_id) throws (1: CatenaError err),

  // Evens out replica, head and tail counts across ALIVE, serving nodes (a newly
  // registered node among them) by tail-offset handoffs (movePartition: no
  // history is copied), keeping every chain's zone spread. dry_run: only
  // the plan. Otherwise the moves are made one by one; a failed one is
  // reported in its `error` and the rest still run. Chains under repair,
  // a move or a drain are left alone.
  RebalancePlan rebalance(1: bool dry_run) throws (1: CatenaError err),

  // Adding a node: rebalance(dry_run) once node_id, a registered node, is
  // one the plan may put partitions on (`catena node add`, and catenad
  // --join-rebalance once it registered). A node is ALIVE as soon as it
  // registered. UNKNOWN_NODE if it never registered; UNAVAILABLE, naming
  // its state, while it is SUSPECT or DEAD (it may come back: retry);
  // INVALID_ARGUMENT if it is DRAINING or DRAINED. One rebalance runs at a
  // time; a second waits for the first and plans from what it left.
  RebalancePlan addNode(1: string node_id, 2: bool dry_run) throws (1: CatenaError err),

  // Subscriber-group progress: offset is the next record the group will
  // consume from channel/partition. Durable when answered (commits that
  // arrive together share one metadata write: commit periodically, not per
  // message); UNAVAILABLE if the metadata store has not taken it within 4 s,
  // or if 8 commits wait for it already (it may still be taken: commit
  // again). May move backwards (a rewind).
  void commitOffset(1: string group, 2: string channel, 3: i32 partition, 4: i64 offset)
      throws (1: CatenaError err),
  // The last committed offset; NO_OFFSET if the group never committed one.
  i64 fetchOffset(1: string group, 2: string channel, 3: i32 partition) throws (1: CatenaError err),

  // A new producer epoch for producer_id, durable before it is returned.
  // producer_id 0: a new id is issued too (issued ids have bit 62 set);
  // otherwise 1 .. 2^62-1, chosen by the application (an id stable across
  // restarts), else INVALID_ARGUMENT.
  ProducerIdentity initProducer(1: i64 producer_id) throws (1: CatenaError err),

  // Changes the channel's partition count to `partitions` live (see
  // ChannelGeneration): one metadata record places the partitions it adds
  // and opens generation g+1 with the affected partitions; then a marker is
  // appended at the head of each (appendMarker) and committed; the record
  // that notes the last one completes the generation and sets
  // config.partitions. Only the affected partitions' heads and the new
  // partitions' replicas are called. Returns the channel as it is then.
  // INVALID_ARGUMENT: partitions out of 1..1024, or the same as now;
  // UNAVAILABLE: an affected chain is being repaired or moved, a head could
  // not be reached, or another alter is under way (the message says which);
  // an alter that stopped half way is finished by tick() or by calling
  // alterChannel again with the same count.
  ChannelInfo alterChannel(1: string name, 2: i32 partitions) throws (1: CatenaError err),

  // Changes the channel's retention (config.ttl_ms) live: one metadata
  // record, then every replica of every partition (chain, joining, sealed
  // ranges) is sent its assignment again at the same route epoch with the
  // new ttl_ms (no client is disturbed), until each confirmed it; a node out
  // of reach is retried by tick(), and a node that restarts or rejoins gets
  // it with its assignment. On a node the new ttl applies to every segment
  // not yet expired, sealed ones included (a shorter ttl expires old data
  // at once); a segment already expired stays expired. Returns the channel.
  // INVALID_ARGUMENT: ttl_ms out of the bounds of createChannel, or the same
  // as now; UNAVAILABLE while the channel is being altered (partitions).
  ChannelInfo alterRetention(1: string name, 2: i64 ttl_ms) throws (1: CatenaError err),

  // Deletes a channel: its routes, high-water marks, moves' and handoffs'
  // state and every group's offsets in it go in one metadata record (its
  // tenant's quota use with them); then, once pushes of its routes in flight
  // have been answered, every node that held a role in it (chain, joining,
  // sealed ranges) is sent a configureChain naming no replica at the next
  // epoch, which drops the partition there (and its sealed ranges). Nodes
  // that could not be reached are retried by tick(), and a node that later
  // reports a partition of the deleted channel in a heartbeat (after a
  // controller restart too) is sent its drop then. Clients get
  // UNKNOWN_CHANNEL from then on. A channel created again under the name
  // starts empty, at offset 0, its route epochs above every epoch the
  // deleted one used; its pushes to a node wait for a drop still owed there.
  // UNKNOWN_CHANNEL if there is none;
  // UNAVAILABLE while one of its partitions is being moved, repaired or
  // altered (retry); INVALID_ARGUMENT while a subscriber group has members
  // reading it.
  void deleteChannel(1: string name) throws (1: CatenaError err),
  // --- Subscriber groups (controller_groups.hpp; membership is held in the
  // controller's memory, offsets durably) ---

  // Joins `group` reading `channel` (a group reads one channel). member_name
  // is for people. owned: partitions the caller still consumes from an
  // earlier membership (its heartbeat answered UNKNOWN_MEMBER, say after a
  // controller restart): given back to it when no one else owns them, so it
  // goes on without a record delivered twice. Returns a new member id.
  GroupAssignment joinGroup(1: string group, 2: string channel, 3: string member_name, 4: list<i32> owned)
      throws (1: CatenaError err),
  // Keeps the membership alive; released: partitions of an earlier revoke
  // list the member stopped consuming after committing their offsets.
  // UNKNOWN_MEMBER: the member is gone (it must stop consuming and join).
  GroupAssignment groupHeartbeat(1: string group, 2: string member_id, 3: list<i32> released)
      throws (1: CatenaError err),
  // Leaves now: its partitions go to the others from their committed offsets.
  void leaveGroup(1: string group, 2: string member_id) throws (1: CatenaError err),
  // One durable record for many partitions, answered as commitOffset is.
  // Fenced: member_id must own each partition (NOT_OWNER) and have held it
  // since at least `generation` (NOT_OWNER too); nothing is written unless
  // all pass. UNKNOWN_MEMBER for an unknown member. A member's commit never
  // moves an offset backwards.
  void commitOffsets(1: string group, 2: string channel, 3: string member_id, 4: i64 generation,
                     5: list<PartitionOffset> offsets) throws (1: CatenaError err),
  // Every group with members or committed offsets.
  list<string> listGroups() throws (1: CatenaError err),
  GroupStatus describeGroup(1: string group) throws (1: CatenaError err),

  // --- Tenants (README "Tenants") ---
  //
  // With an admin token configured (catena-controller --admin-token-file),
  // every other call on a connection needs a successful authenticate on it
  // first (UNAUTHENTICATED). The admin may make every call; a tenant only
  // calls on names in its namespace ("<tenant>.<rest>"): createChannel,
  // listChannels (its own only), describeChannel, getRoute, alterChannel,
  // alterRetention, deleteChannel,
  // reportFailure (naming its channel), commitOffset, fetchOffset,
  // initProducer, the group calls (listGroups: its own only). Anything else,
  // or a name outside its namespace, is PERMISSION_DENIED: the same answer
  // whether or not such a channel exists. Without an admin token a
  // connection that never authenticates is the admin (open mode); one that
  // authenticates with a tenant token is that tenant.

  // Binds the identity of token to this connection. UNAUTHENTICATED for a
  // token that is neither the admin's nor a tenant's.
  Identity authenticate(1: string token) throws (1: CatenaError err),
  // Admin only. name: [A-Za-z0-9_-]{1,64} (no '.'). Returns the tenant's
  // token (64 hex digits), shown this once: the controller keeps only its
  // SHA-256. CHANNEL_EXISTS if the tenant exists.
  string createTenant(1: string name, 2: TenantQuotas quotas) throws (1: CatenaError err),
  // Admin only.
  list<TenantInfo> listTenants() throws (1: CatenaError err),
  // Admin only. Refused (INVALID_ARGUMENT) while its namespace holds a
  // channel. Connections authenticated as it are refused from then on.
  void deleteTenant(1: string name) throws (1: CatenaError err),
  // Admin only: a new token; the old one stops working (connections already
  // authenticated with it are refused from their next call).
  string rotateTenantToken(1: string name) throws (1: CatenaError err),
  // Admin only: replaces the tenant's quotas (all of them: read them with
  // listTenants first). A limit below the current use is allowed: it
  // refuses growth from then on and takes nothing away. New zones apply to
  // every placement from then on (creating, growing, repairing, moving);
  // chains already placed stay where they are.
  void alterTenant(1: string name, 2: TenantQuotas quotas) throws (1: CatenaError err),
}

// What a broker must host for one partition.
// A tenant's limits on each node (its TenantQuotas), sent with every
// assignment of its partitions; -1: unlimited.
struct TenantNodeLimits {
  1: string tenant,
  2: i64 publisher_ring_bytes = -1,
  3: i64 publish_bytes_per_sec = -1,
  4: i64 sessions = -1,
}

struct ChainAssignment {
  1: PartitionRoute route,     // the broker finds its role by its position
  2: i64 segment_bytes,
  3: i64 ttl_ms,
  4: i32 channel_partitions,
  // 16 bytes the controller derives for this route epoch and gives only to
  // its members (never in getRoute): a replica accepts a predecessor's link
  // only with it, so a client that knows the route cannot pose as a replica.
  5: optional binary link_secret,
  // Partition handoff: the producer state of the chain this one continues,
  // taken in by its head before it takes any append. Empty otherwise.
  6: list<ProducerSnapshot> producers,
  // The partition's identity in this cluster (HMAC of the controller's link
  // key and the partition, so another cluster's is another): a broker takes
  // back memory it kept through a restart only for the lineage it was
  // written under.
  7: optional binary lineage,
  // The partition's access secret (PartitionRoute.access_secret): a replica
  // refuses client hellos without it (unauthenticated).
  8: optional binary access_secret,
  // The channel's tenant (the namespace it is in) and its per-node limits;
  // unset for a channel outside every tenant's namespace.
  9: optional TenantNodeLimits tenant,
}

struct MarkerReply {
  1: i64 offset,               // where the marker record lies
  2: i64 commit_offset,        // the chain has committed up to here
}

struct SealReply {
  1: i64 end_offset,           // every record the head stored lies below it
  2: i64 commit_offset,        // the chain has committed up to here
  3: list<ProducerSnapshot> producers,
}

// Implemented by every broker; called only by the controller, which is the
// sole source of epochs. Calls may arrive late, twice, or out of order (the
// controller retries after timeouts), so every method is idempotent and
// decided by epoch alone.
service BrokerAdmin {
  // The first call of every connection, once the broker has registered
  // (RegisterReply.admin_secret): binds the connection to the controller
  // epoch that opened it. Refused as UNAUTHENTICATED with another secret,
  // and as NOT_LEADER with an epoch older than the newest the broker heard
  // of (registration, heartbeat replies, authenticate). Every other call is
  // refused as UNAUTHENTICATED on a connection that has not authenticated,
  // and as NOT_LEADER once a newer controller epoch is known: a deposed
  // leader that wakes up cannot reconfigure, fence, seal or probe anything.
  void authenticate(1: binary admin_secret, 2: i64 controller_epoch) throws (1: CatenaError err),

  // Install route for (route.channel, route.partition).
  //   route.epoch <  installed: throw STALE_EPOCH with the installed route.
  //   route.epoch == installed: success; only ttl_ms is taken (alterRetention),
  //                             the rest is a no-op (the controller retries).
  //   route.epoch >  installed: adopt it; refuse data-plane traffic carrying
  //                             older epochs from now on.
  // The broker's role is its position in route.replicas (0: head, last:
  // tail), or, if it is in route.joining, a joining replica after the tail
  // (copies, never commits or serves). A broker in neither drops the
  // partition.
  void configureChain(1: ChainAssignment assignment) throws (1: CatenaError err),

  // The caller was removed from the chain of (channel, partition) at epoch:
  // refuse everything for that partition below epoch and hold no role in it
  // until a configureChain at >= epoch names this broker again. Sent best
  // effort to evicted nodes. Idempotent; an epoch <= installed is a no-op.
  void fence(1: string channel, 2: i32 partition, 3: i64 epoch) throws (1: CatenaError err),

  // Liveness probe; also reports load.
  NodeStats ping() throws (1: CatenaError err),

  // Partition handoff: the head of (channel, partition) at `epoch` stops
  // taking appends (publishers are answered `moved`) and keeps forwarding
  // and committing. Idempotent: call again until commit_offset reaches
  // end_offset. STALE_EPOCH if the replica is at another epoch,
  // INVALID_ARGUMENT if it is not the head. A newer epoch lifts the seal.
  SealReply seal(1: string channel, 2: i32 partition, 3: i64 epoch) throws (1: CatenaError err),

  // Channel alter: the head of (channel, partition) at `epoch` appends a
  // marker record for `generation` (a control record: subscribers see it
  // only if they ask for control records) and from then on refuses appends
  // from publishers mapping keys by an older generation. Idempotent: a
  // replica that holds a marker for `generation` or newer answers its
  // offset. Call again until commit_offset > offset. STALE_EPOCH if the
  // replica is at another epoch, INVALID_ARGUMENT if it is not the head.
  // from_partitions/to_partitions: the generation's partition counts
  // before and after, carried in the marker (chain::MarkerSpec).
  MarkerReply appendMarker(1: string channel, 2: i32 partition, 3: i64 epoch, 4: i32 generation,
                           5: i32 from_partitions, 6: i32 to_partitions) throws (1: CatenaError err),
}
