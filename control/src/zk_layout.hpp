// How a meta::MetaState lies in ZooKeeper: which znodes there are, what each
// holds, and which of them a meta::MetaRecord changes. Pure functions, no
// ZooKeeper calls; the store (zk_metadata_store.cpp) turns their answers
// into one transaction.
//
// Under the store's root (every payload Thrift binary):
//   controller_epoch             meta::ZkControllerEpoch (the fence)
//   counters                     meta::ZkCounters (MetaState's scalars, the drops owed)
//   nodes/<node id>              meta::NodeRecord
//   channels/<channel>           meta::ChannelRecord without its routes
//   channels/<channel>/<p>       idl::PartitionRoute of partition p
//   intents/<id>                 meta::RepairIntent
//   offsets/<group>:<channel>    meta::ZkOffsets (committed offsets)
//   high_water/<channel>         meta::ZkOffsets (high-water marks)
//   moves/<channel>:<p>          meta::MoveIntent
//   handoffs/<channel>:<p>       meta::Handoff
//   tenants/<tenant>             meta::TenantRecord (its token as SHA-256 only)
// Names are escaped (escape_name) so that none holds '/' or ':'.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <catena/control/idl/catena_meta_types.h>

namespace catena::control::zk {

// The folders under the root that hold one znode per item.
inline constexpr std::string_view kFolders[] = {"nodes",      "channels", "intents",  "offsets",
                                                "high_water", "moves",    "handoffs", "tenants"};

// One znode of the state. Ordered so that a channel comes before its routes.
struct Key {
  enum class Kind { counters, node, channel, route, intent, offsets, high_water, move, handoff, tenant };
  Kind kind = Kind::counters;
  std::string a;       // node id, channel, group or tenant
  std::string b;       // the channel of a group's offsets
  std::int64_t n = 0;  // partition or intent id

  auto operator<=>(const Key&) const = default;
};

// Percent-escapes every byte outside [A-Za-z0-9._-], and a leading '.'
// (so neither "." nor ".." is a name).
[[nodiscard]] std::string escape_name(std::string_view name);
// The inverse; nullopt if name is not an escaped name.
[[nodiscard]] std::optional<std::string> unescape_name(std::string_view name);

// The znode's path below the root ("nodes/node-1").
[[nodiscard]] std::string path_of(const Key& key);
// The key of a znode listed in folder (a name from kFolders), or nullopt if
// its name is not one of ours. Routes are not listed this way.
[[nodiscard]] std::optional<Key> key_in_folder(std::string_view folder, std::string_view name);

// The znodes record changes when applied to before.
[[nodiscard]] std::set<Key> keys_touched(const meta::MetaState& before, const meta::MetaRecord& record);

// What the znode holds for state; nullopt if it does not exist.
[[nodiscard]] std::optional<std::string> encode_key(const meta::MetaState& state, const Key& key);

// Makes key in state what data says (absent: removes it). Used to load and
// to undo. False if data does not decode. A route needs its channel first.
[[nodiscard]] bool put_key(meta::MetaState& state, const Key& key, const std::optional<std::string>& data);

}  // namespace catena::control::zk
