// Controller: what chain repair does before it asks placement for a new
// node. A node that registers again holding replicas of short chains it was
// taken out of rejoins them first (behind the tail, like any replacement,
// but it copies only what it lacks); a chain that lost a member waits
// Options::replacement_delay for it to come back; and placement prefers the
// lost member's zone, then the chain's datacenters (placement.hpp). All of
// it is in memory: a controller restart forgets candidates (their copies are
// fenced as before) and starts the waits again. Runs from register_node,
// evict_locked and restore_replication_locked (controller_repair.cpp).
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include <catena/control/controller.hpp>

#include "route_members.hpp"

namespace catena::control {

using route_members::contains;
using route_members::members_of;

std::int32_t Controller::missing_replicas_locked(const idl::PartitionRoute& route,
                                                 std::int32_t replication) const {
  // A draining member counts as gone already: its replacement joins while
  // it still serves, and takes its place when promoted.
  const auto serving =
      std::count_if(route.replicas.begin(), route.replicas.end(), [&](const idl::Replica& r) {
        mu_.assert_held();  // runs here, under the caller's lock
        return !draining_locked(r.node_id);
      });
  return replication - static_cast<std::int32_t>(serving) - static_cast<std::int32_t>(route.joining.size());
}

bool Controller::keep_for_rejoin_locked(const meta::NodeRecord& node, const idl::PartitionProgress& held) {
  const std::string& id = node.info.node_id;
  auto ch = channel_locked(held.channel);
  auto route = route_locked(held.channel, held.partition);
  if (!ch || !route) return false;
  const auto& r = **route;
  // Only a chain with members to copy from, that still needs a replica,
  // and data of its current range (a move or a rebuild starts the chain
  // above what the node kept of an earlier one).
  if (r.replicas.empty() || contains(r, id) || held.end_offset < r.start_offset) return false;
  if (node.drain != idl::DrainState::SERVING) return false;
  auto& candidates = rejoiners_[{held.channel, held.partition}];
  if (static_cast<std::int32_t>(candidates.size()) >= missing_replicas_locked(r, (*ch)->config.replication)) {
    return false;
  }
  candidates.push_back(Rejoiner{id, node.node_epoch, held.end_offset});
  spdlog::info("{}/{}: {} kept a replica (up to offset {}) and may rejoin the chain, epoch {}", held.channel,
               held.partition, id, held.end_offset, r.epoch);
  return true;
}

void Controller::forget_rejoiner_locked(const std::string& node_id) {
  for (auto& [rid, candidates] : rejoiners_) {
    std::erase_if(candidates, [&](const Rejoiner& c) { return c.node_id == node_id; });
  }
  // Back (with or without the partition) or gone for good: nothing to wait for.
  const auto now = clock_.now();
  for (auto& [rid, lost] : lost_members_) {
    for (auto& m : lost) {
      if (m.node_id == node_id) m.until = std::min(m.until, now);
    }
  }
}

void Controller::note_lost_member_locked(const idl::PartitionRoute& route, const std::string& node_id) {
  auto& lost = lost_members_[{route.channel, route.partition}];
  if (std::any_of(lost.begin(), lost.end(), [&](const LostMember& m) { return m.node_id == node_id; }))
    return;
  const auto* node = node_locked(node_id);
  lost.push_back(LostMember{node_id, node != nullptr ? node->info.zone : std::string(),
                            clock_.now() + options_.replacement_delay});
}

void Controller::fence_rejoiner_locked(const idl::PartitionRoute& route, const Rejoiner& candidate,
                                       const char* why) {
  const auto* node = node_locked(candidate.node_id);
  if (node == nullptr || node->dead || node->node_epoch != candidate.node_epoch ||
      contains(route, candidate.node_id)) {
    return;
  }
  spdlog::info("{}/{}: {} does not rejoin ({}); its kept copy is dropped", route.channel, route.partition,
               candidate.node_id, why);
  fences_.push_back(FenceJob{broker_target_locked(candidate.node_id, node->info.admin_addr), route.channel,
                             route.partition, route.epoch});
}

std::vector<std::string> Controller::take_rejoiners_locked(const idl::PartitionRoute& route,
                                                           std::int32_t missing) {
  std::vector<std::string> out;
  auto it = rejoiners_.find({route.channel, route.partition});
  if (it == rejoiners_.end()) return out;
  const std::vector<Rejoiner> candidates = std::move(it->second);
  rejoiners_.erase(it);
  for (const auto& c : candidates) {
    const auto* node = node_locked(c.node_id);
    const bool eligible = node != nullptr && !node->dead && node->node_epoch == c.node_epoch &&
                          !contains(route, c.node_id) && detector_.is_alive(c.node_id) &&
                          node->drain == idl::DrainState::SERVING && !route.replicas.empty();
    if (!eligible || static_cast<std::int32_t>(out.size()) >= missing) {
      fence_rejoiner_locked(route, c, eligible ? "the chain needs no more replicas" : "not eligible now");
      continue;
    }
    spdlog::info("{}/{}: {} rejoins with the data it kept (held up to offset {})", route.channel,
                 route.partition, c.node_id, c.end_offset);
    ++recoveries_.kept_data_rejoins;
    out.push_back(c.node_id);
  }
  return out;
}

void Controller::drop_rejoiners_locked(const idl::PartitionRoute& route) {
  lost_members_.erase({route.channel, route.partition});
  auto it = rejoiners_.find({route.channel, route.partition});
  if (it == rejoiners_.end()) return;
  const std::vector<Rejoiner> candidates = std::move(it->second);
  rejoiners_.erase(it);
  for (const auto& c : candidates) fence_rejoiner_locked(route, c, "the chain was restored without it");
}

bool Controller::awaiting_lost_member_locked(const idl::PartitionRoute& route) {
  auto it = lost_members_.find({route.channel, route.partition});
  if (it == lost_members_.end()) return false;
  const auto now = clock_.now();
  auto waiting =
      std::find_if(it->second.begin(), it->second.end(), [&](const LostMember& m) { return now < m.until; });
  if (waiting == it->second.end()) return false;
  if (warned_waiting_.insert({{route.channel, route.partition}, route.epoch}).second) {
    spdlog::warn("{}/{}: waiting up to {} ms for {} to come back with its data before placing a replacement",
                 route.channel, route.partition,
                 std::chrono::duration_cast<std::chrono::milliseconds>(waiting->until - now).count(),
                 waiting->node_id);
  }
  return true;
}

PlacementPreference Controller::preference_for_locked(const idl::PartitionRoute& route) const {
  PlacementPreference prefer;
  if (auto it = lost_members_.find({route.channel, route.partition}); it != lost_members_.end()) {
    for (const auto& m : it->second) prefer.zones.insert(m.zone);
  }
  for (const auto* r : members_of(route)) {
    if (draining_locked(r->node_id)) continue;  // leaving: not where the chain stays
    if (const auto* n = node_locked(r->node_id)) prefer.datacenters.insert(n->info.datacenter);
  }
  return prefer;
}

void Controller::count_replacements_locked(const idl::PartitionRoute& route,
                                           const PlacementPreference& prefer,
                                           const std::vector<std::string>& chosen) {
  for (const auto& id : chosen) {
    const auto* n = node_locked(id);
    if (n == nullptr) continue;
    if (prefer.zones.count(n->info.zone) != 0) {
      ++recoveries_.replaced_in_lost_zone;
    } else if (prefer.datacenters.empty() || prefer.datacenters.count(n->info.datacenter) != 0) {
      ++recoveries_.replaced_in_other_zone;
    } else {
      ++recoveries_.replaced_in_other_datacenter;
      spdlog::warn("{}/{}: no node in datacenter {} (in a zone the chain does not use), replacement {} in {}",
                   route.channel, route.partition, fmt::join(prefer.datacenters, ", "), id,
                   n->info.datacenter);
    }
  }
}

}  // namespace catena::control
