// What the controller's maintenance code asks of a route: who is in it, in
// which role, and how to print it for a log line. Private to the controller.
#pragma once

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <string>
#include <vector>

#include <catena/control/controller.hpp>

namespace catena::control::route_members {

// "a -> b -> c", then " (joining: d)" if any are joining, for logs.
inline std::string describe_chain(const idl::PartitionRoute& route) {
  std::vector<std::string> ids;
  for (const auto& r : route.replicas) ids.push_back(r.node_id);
  std::string out = fmt::format("[{}]", fmt::join(ids, " -> "));
  if (route.joining.empty()) return out;
  ids.clear();
  for (const auto& r : route.joining) ids.push_back(r.node_id);
  return out + fmt::format(" (joining: {})", fmt::join(ids, " -> "));
}

inline bool has_node(const std::vector<idl::Replica>& list, const std::string& node_id) {
  return std::any_of(list.begin(), list.end(), [&](const idl::Replica& r) { return r.node_id == node_id; });
}

// In the chain or joining it.
inline bool contains(const idl::PartitionRoute& route, const std::string& node_id) {
  return has_node(route.replicas, node_id) || has_node(route.joining, node_id);
}

// In the chain, joining it, or holding one of its sealed ranges.
inline bool names(const idl::PartitionRoute& route, const std::string& node_id) {
  return contains(route, node_id) ||
         std::any_of(route.sealed.begin(), route.sealed.end(),
                     [&](const idl::SealedRange& range) { return has_node(range.replicas, node_id); });
}

inline void erase_node(std::vector<idl::Replica>& list, const std::string& node_id) {
  std::erase_if(list, [&](const idl::Replica& r) { return r.node_id == node_id; });
}

// Every node that holds (or is copying) the partition and must be pushed
// its route: the chain, then the joining replicas.
inline std::vector<const idl::Replica*> members_of(const idl::PartitionRoute& route) {
  std::vector<const idl::Replica*> out;
  for (const auto& r : route.replicas) out.push_back(&r);
  for (const auto& r : route.joining) out.push_back(&r);
  return out;
}

// Members, then the nodes of sealed ranges that are not members (partition
// handoff: they are told the route so that they keep their range read-only).
inline std::vector<const idl::Replica*> push_targets_of(const idl::PartitionRoute& route) {
  std::vector<const idl::Replica*> out = members_of(route);
  for (const auto& range : route.sealed) {
    for (const auto& r : range.replicas) {
      const bool listed =
          std::any_of(out.begin(), out.end(), [&](const idl::Replica* o) { return o->node_id == r.node_id; });
      if (!listed) out.push_back(&r);
    }
  }
  return out;
}

// The route as pushed to one node: its chain and joining replicas as they
// are, and of the sealed ranges only those the node holds. A broker acts only
// on the sealed ranges that name it (keeps them read-only, lets go of the
// others it held), so the rest would be bytes for nothing: a push stays the
// same size however many moves the partition has had.
inline idl::PartitionRoute route_for_node(const idl::PartitionRoute& route, const std::string& node_id) {
  idl::PartitionRoute out = route;
  std::erase_if(out.sealed,
                [&](const idl::SealedRange& range) { return !has_node(range.replicas, node_id); });
  return out;
}

// The epoch of the newest sealed range that names the node (0: none). A
// route at a later epoch lists all its ranges as sealed.
inline std::int64_t newest_range_epoch(const idl::PartitionRoute& route, const std::string& node_id) {
  std::int64_t out = 0;
  for (const auto& range : route.sealed) {
    if (has_node(range.replicas, node_id)) out = std::max(out, range.epoch);
  }
  return out;
}

inline std::string role_in(const idl::PartitionRoute& route, const std::string& node_id) {
  if (has_node(route.joining, node_id)) return "joining";
  if (route.replicas.size() == 1) return "only replica";
  if (route.replicas.front().node_id == node_id) return "head";
  if (route.replicas.back().node_id == node_id) return "tail";
  return "middle";
}

}  // namespace catena::control::route_members
