// The controller's durable metadata, as stored in its write-ahead log and
// snapshots. Private to the controller: nothing else reads these files.
//
// A MetaRecord is one atomic batch of mutations, applied in field order by
// apply_record() both live and on replay, so a restart rebuilds exactly the
// state the controller had acknowledged.

include "catena.thrift"

namespace cpp catena.control.meta

struct NodeRecord {
  1: catena.NodeInfo info,
  2: i64 node_epoch,
  3: bool dead,                // node_epoch retired; heartbeats get fenced=true
  // `catena node drain`: DRAINING takes no new replicas and survives
  // evictions and re-registrations; DRAINED is set once the node is in no
  // route, and a registration clears it.
  4: catena.DrainState drain = catena.DrainState.SERVING,
}

struct ChannelRecord {
  1: catena.ChannelConfig config,
  2: list<catena.PartitionRoute> routes,
  3: list<catena.ChannelGeneration> generations,   // see ChannelInfo
  // The epoch its routes started at (channel_epoch_floor + 1 when it was
  // created; 0 if created before deletes existed): a node reporting one of
  // its partitions at an older epoch holds a deleted channel's copy.
  4: i64 first_epoch = 0,
}

struct RouteKey {
  1: string channel,
  2: i32 partition,
}

// Written before a dead node is removed from its chains; closed once every
// listed route no longer contains the node and has its replication factor
// back (or the channel is gone).
struct RepairIntent {
  1: i64 id,
  2: string node_id,
  3: i64 node_epoch,
  4: string reason,
  5: list<RouteKey> routes,
}

// The next offset a subscriber group consumes from one partition.
struct OffsetCommit {
  1: string group,
  2: string channel,
  3: i32 partition,
  4: i64 offset,
}

// A partition move in progress (Controller::move_partition), written before
// the old head is sealed; removed by the record that commits the move or
// gives it up. A controller that restarts with one open gives it up: the
// old chain goes on at a new epoch (which lifts the seal).
struct MoveIntent {
  1: string channel,
  2: i32 partition,
  3: i64 from_epoch,
  4: list<string> to,
}

// The producer state a committed move handed to its new head, pushed with
// the route to replicas[0] while the route is at `epoch` (so a push that is
// retried, or redone after a restart, still carries it).
struct Handoff {
  1: i64 epoch,
  2: list<catena.ProducerSnapshot> producers,
}

// A committed move (Controller::move_partition), as one record that names
// only what changed: the partition's route goes to `epoch`, its chain to
// `replicas` serving [start_offset, ...), no joining replicas, and `sealed`
// (the range the old chain wrote, absent when it wrote nothing) is appended
// to its sealed ranges. The ranges sealed before stay as they are, so a
// move's record does not grow with the moves before it.
struct RouteMove {
  1: string channel,
  2: i32 partition,
  3: i64 epoch,
  4: list<catena.Replica> replicas,
  5: i64 start_offset,
  6: optional catena.SealedRange sealed,
}

// A tenant (createTenant): its token only as SHA-256.
struct TenantRecord {
  1: string name,
  2: catena.TenantQuotas quotas,
  3: binary token_sha256,
  4: i64 created_at_ms,
  // Grows with every rotateTenantToken: the access secrets of the tenant's
  // partitions are derived with it, so a rotation revokes those handed out
  // before (0: as before rotation existed).
  5: i64 access_generation = 0,
}

// A deleted channel's partition still to be dropped on a node (deleteChannel):
// kept with the delete record until the node confirmed it, so that the
// controller leading after a restart delivers it too. The link secret and
// lineage are derived from link_key when it is sent.
struct PendingDrop {
  1: string node_id,
  2: catena.PartitionRoute route,   // naming no replica, one epoch above the channel's
  3: i64 segment_bytes,
  4: i64 ttl_ms,
  5: i32 channel_partitions,
}

struct MetaState {
  1: map<string, NodeRecord> nodes,
  2: map<string, ChannelRecord> channels,
  3: map<i64, RepairIntent> intents,
  4: i64 next_node_seq = 1,
  5: i64 next_node_epoch = 1,
  6: i64 next_intent_id = 1,
  7: map<string, map<string, map<i32, i64>>> group_offsets,   // group -> channel -> partition -> offset
  // Producer ids and epochs are numbers below this that were never issued
  // twice: the controller reserves them in blocks and, after a restart,
  // continues above the last reservation.
  20: i64 producer_numbers_reserved = 0,
  // Random key from which every route epoch's replica-link secret is derived
  // (HMAC-SHA256), so a restarted controller pushes the same secret for the
  // same epoch. Created with the metadata.
  21: binary link_key,
  // channel -> partition -> the highest end offset any replica of it ever
  // reported. A chain rebuilt after every copy was lost starts at the next
  // multiple of 2^32 above it, so no offset handed out before is handed out
  // again.
  8: map<string, map<i32, i64>> high_water,
  // channel -> partition -> the move in progress.
  9: map<string, map<i32, MoveIntent>> moves,
  // channel -> partition -> the last move's producer state.
  10: map<string, map<i32, Handoff>> handoffs,
  // Tenants by name.
  60: map<string, TenantRecord> tenants,
  // One above the highest route epoch (sealed ranges' included) of any
  // deleted channel, the epoch its partitions were dropped at: a channel
  // created after a delete starts its routes above it (ChannelRecord.first_epoch),
  // so that a broker still holding a partition of the deleted one (it could
  // not be told to drop it) refuses nothing of the new one, and is known by
  // the older epoch it reports and told to drop its copy first.
  23: i64 channel_epoch_floor = 0,
  // The directory store's controller epoch: taken (+1) by every open, so a
  // restarted controller's BrokerAdmin calls outrank its predecessor's.
  // The ZooKeeper store keeps its own in <root>/controller_epoch.
  22: i64 controller_epoch = 0,
  // Drops of deleted channels' partitions not yet confirmed by their node.
  24: list<PendingDrop> pending_drops,
}

struct MetaRecord {
  1: optional NodeRecord put_node,
  2: optional ChannelRecord put_channel,
  3: optional list<catena.PartitionRoute> put_routes,
  4: optional RepairIntent begin_repair,
  5: optional i64 end_repair,
  6: optional i64 next_node_seq,
  7: optional i64 next_node_epoch,
  8: optional i64 next_intent_id,
  9: optional OffsetCommit commit_offset,
  20: optional i64 producer_numbers_reserved,
  21: optional binary set_link_key,
  22: optional i64 set_controller_epoch,
  10: optional map<string, map<i32, i64>> raise_high_water,   // applied as max()
  11: optional MoveIntent begin_move,
  12: optional RouteKey end_move,
  13: optional RouteKey handoff_key,
  14: optional Handoff set_handoff,             // with handoff_key
  40: optional RouteMove move_route,            // a committed move; applied after put_routes
  // A subscriber group's batch commit (commitOffsets): one record, one fsync.
  30: optional list<OffsetCommit> commit_offsets,
  // Tenants: created or changed (a new token), or removed.
  60: optional TenantRecord put_tenant,
  61: optional string delete_tenant,
  // A channel deleted (deleteChannel), with its routes, high-water marks,
  // moves, handoffs and groups' offsets; raises channel_epoch_floor to one
  // above its routes' highest epoch. Applied after everything else in the record.
  62: optional string delete_channel,
  // Drops owed (with delete_channel) and drops confirmed or given up (the
  // node answered, or it was declared dead): matched by node, channel,
  // partition and epoch.
  63: optional list<PendingDrop> add_drops,
  64: optional list<PendingDrop> end_drops,
}

// What the ZooKeeper store (zk_metadata_store.cpp) keeps in the znodes that
// hold no record of their own. A MetaState is the union of all its znodes.

// <root>/controller_epoch: rewritten (version-checked) by every change, so
// its version guards every transaction and tells, after a lost connection,
// whether the last one was applied.
struct ZkControllerEpoch {
  1: i64 epoch,          // bumped by every store that opens the metadata
  2: i64 transactions,   // changes committed under this epoch
  3: string holder,      // host:pid of the controller that holds it
}

// <root>/counters: MetaState's scalars.
struct ZkCounters {
  1: i64 next_node_seq = 1,
  2: i64 next_node_epoch = 1,
  3: i64 next_intent_id = 1,
  4: i64 producer_numbers_reserved = 0,
  5: binary link_key,
  6: i64 channel_epoch_floor = 0,
  7: list<PendingDrop> pending_drops,
}

// partition -> offset: a channel's high-water marks, or one group's
// committed offsets in one channel.
struct ZkOffsets {
  1: map<i32, i64> offsets,
}
