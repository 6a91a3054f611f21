// Controller: draining a node (`catena node drain`), rebalancing
// (`catena rebalance`) and adding a node (`catena node add`, catenad
// --join-rebalance: a rebalance once the node may take partitions).
//
// A drain reuses chain repair's joining stage instead of a machinery of its
// own. drain_node() only checks and records DRAINING on the node (one
// metadata record: a restarted controller carries on from it); then, from
// tick():
//   1. restore_replication_locked() counts a DRAINING member as missing, so
//      a replacement (zone first, then load; never a DRAINING or DRAINED
//      node) joins behind the tail and copies every retained segment while
//      the chain keeps committing and acknowledging;
//   2. promote_caught_up_locked(), once the tail reports it synced, makes it
//      the tail and, in the same route change, takes the DRAINING member out
//      of the chain wherever it was (drop_drained_member_locked): a head's
//      successor becomes the head (publishers follow the new route as after
//      a head failure: records the old head had not committed are resent,
//      never acknowledged twice), a middle's predecessor links to its
//      successor, a tail's predecessor forwards to the promoted replica;
//      the drained node is fenced at the new epoch;
//   3. drain_step_locked() takes it out of joining lists and of the sealed
//      ranges another live, serving member also holds (or that expired),
//      and marks it DRAINED once no route names it.
// What a failure at each step leaves: the replacement dies while copying:
// repair drops it and another joins (step 1 again); the draining node dies:
// it is evicted and repaired like any other (the replacement already
// joining is promoted as usual) and stays DRAINING, so an empty incarnation
// that registers again is DRAINED at once; the controller restarts: every
// step is decided from the metadata (DRAINING, the routes) and resumes.
//
// Sealed ranges: a range whose records have not expired and that no other
// live, serving member holds is the only copy of that history; the drain is
// refused naming such ranges (wait for their expiry, or for another member
// to come back). A range shared with a member that dies during the drain
// keeps the draining node until it expires (the drain waits).
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include <catena/control/controller.hpp>
#include <catena/control/rebalance_plan.hpp>

#include "route_members.hpp"

namespace catena::control {

using route_members::contains;
using route_members::describe_chain;
using route_members::erase_node;
using route_members::has_node;
using route_members::members_of;
using route_members::names;

namespace {

const char* drain_name(idl::DrainState::type s) {
  switch (s) {
    case idl::DrainState::SERVING:
      return "serving";
    case idl::DrainState::DRAINING:
      return "draining";
    case idl::DrainState::DRAINED:
      return "drained";
  }
  return "?";
}

}  // namespace

std::int64_t Controller::wall_ms() const {
  if (options_.wall_clock_ms) return options_.wall_clock_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void Controller::drop_expired_ranges_locked() {
  const std::int64_t now = wall_ms();
  std::vector<idl::PartitionRoute> changed;
  for (const auto& [name, ch] : store_->state().channels) {
    const std::int64_t ttl = ch.config.ttl_ms;  // (a lambda cannot capture a structured binding)
    for (const auto& route : ch.routes) {
      if (route.sealed.empty() || !fully_acked_locked(route)) continue;
      idl::PartitionRoute next = route;
      std::erase_if(next.sealed, [&](const idl::SealedRange& r) { return r.sealed_at_ms + ttl <= now; });
      if (next.sealed.size() == route.sealed.size()) continue;
      next.__set_epoch(route.epoch + 1);
      spdlog::info("{}/{}: {} sealed range(s) expired and left the route, epoch {}", next.channel,
                   next.partition, route.sealed.size() - next.sealed.size(), next.epoch);
      changed.push_back(std::move(next));
    }
  }
  if (changed.empty()) return;
  meta::MetaRecord record;
  record.__set_put_routes(changed);
  if (auto r = store_->commit(record); !r) {
    spdlog::error("could not persist routes without expired ranges (will retry): {}", r.error().describe());
  }
}

bool Controller::draining_locked(const std::string& node_id) const {
  const auto* n = node_locked(node_id);
  return n != nullptr && n->drain == idl::DrainState::DRAINING;
}

bool Controller::leave_sealed_ranges_locked(idl::PartitionRoute& route, const std::string& node_id) const {
  auto ch = channel_locked(route.channel);
  const std::int64_t ttl = ch ? (*ch)->config.ttl_ms : 0;
  const std::int64_t now = wall_ms();
  bool changed = false;
  for (auto& range : route.sealed) {
    if (!has_node(range.replicas, node_id)) continue;
    const bool expired = range.sealed_at_ms + ttl <= now;
    const bool shared = std::any_of(range.replicas.begin(), range.replicas.end(), [&](const idl::Replica& r) {
      mu_.assert_held();  // runs here, under the caller's lock
      const auto* n = node_locked(r.node_id);
      return r.node_id != node_id && n != nullptr && !n->dead && n->node_epoch == r.node_epoch &&
             n->drain == idl::DrainState::SERVING;
    });
    if (!expired && !shared) continue;
    erase_node(range.replicas, node_id);
    changed = true;
  }
  std::erase_if(route.sealed, [](const idl::SealedRange& r) { return r.replicas.empty(); });
  return changed;
}

void Controller::drop_drained_member_locked(idl::PartitionRoute& next) {
  // Not the replica just promoted (the back): it has not been replaced yet.
  for (std::size_t i = 0; i + 1 < next.replicas.size(); ++i) {
    const std::string id = next.replicas[i].node_id;
    if (!draining_locked(id)) continue;
    // Its place in the chain before the promoted replica was appended.
    const std::size_t before = next.replicas.size() - 1;
    const char* role = before == 1 ? "only replica" : i == 0 ? "head" : i + 1 == before ? "tail" : "middle";
    erase_node(next.replicas, id);
    leave_sealed_ranges_locked(next, id);
    if (const auto* n = node_locked(id); n != nullptr && !n->dead) {
      fences_.push_back(
          FenceJob{broker_target_locked(id, n->info.admin_addr), next.channel, next.partition, next.epoch});
    }
    spdlog::info("{}/{}: drained {} (it was the {}); {} takes its place, epoch {}: {}", next.channel,
                 next.partition, id, role, next.replicas.back().node_id, next.epoch, describe_chain(next));
    return;
  }
}

void Controller::drain_step_locked() {
  std::vector<std::string> draining;
  for (const auto& [id, node] : store_->state().nodes) {
    if (node.drain == idl::DrainState::DRAINING && !node.dead) draining.push_back(id);
  }
  if (draining.empty()) return;
  std::vector<idl::PartitionRoute> changed;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      if (!fully_acked_locked(route)) continue;  // one change at a time
      idl::PartitionRoute next = route;
      bool touched = false;
      for (const auto& id : draining) {
        // A member leaves the chain, and its sealed ranges with it, only when
        // its replacement is promoted (drop_drained_member_locked); a fence
        // now would drop the replica it still serves.
        if (has_node(next.replicas, id)) continue;
        const bool joining = has_node(next.joining, id);
        erase_node(next.joining, id);  // it copies for a chain it would leave again
        const bool ranges = leave_sealed_ranges_locked(next, id);
        if (!joining && !ranges) continue;
        touched = true;
        if (!joining) continue;  // a retired range's replica goes with its ttl
        const auto* n = node_locked(id);
        fences_.push_back(FenceJob{broker_target_locked(id, n->info.admin_addr), next.channel, next.partition,
                                   route.epoch + 1});
      }
      if (!touched) continue;
      next.__set_epoch(route.epoch + 1);
      spdlog::info("{}/{}: draining nodes leave its joining list or sealed ranges, epoch {}: {}",
                   next.channel, next.partition, next.epoch, describe_chain(next));
      changed.push_back(std::move(next));
    }
  }
  meta::MetaRecord record;
  if (!changed.empty()) record.__set_put_routes(changed);
  if (!changed.empty()) {
    if (auto r = store_->commit(record); !r) {
      spdlog::error("could not persist drained routes (will retry): {}", r.error().describe());
      return;
    }
  }
  for (const auto& id : draining) {
    const auto& channels = store_->state().channels;
    const bool named = std::any_of(channels.begin(), channels.end(), [&](const auto& entry) {
      const auto& routes = entry.second.routes;
      return std::any_of(routes.begin(), routes.end(),
                         [&](const idl::PartitionRoute& route) { return names(route, id); });
    });
    if (named) continue;
    meta::NodeRecord node = *node_locked(id);
    node.__set_drain(idl::DrainState::DRAINED);
    meta::MetaRecord done;
    done.__set_put_node(node);
    if (auto r = store_->commit(done); !r) {
      spdlog::error("could not mark {} drained (will retry): {}", id, r.error().describe());
      return;
    }
    spdlog::info("node {} is DRAINED: no route names it; it can be stopped", id);
    if (crash_locked("drain.done")) return;
  }
}

idl::NodeStatus Controller::node_status_locked(const meta::NodeRecord& node,
                                               const std::map<std::string, std::int64_t>& counts) const {
  const std::string& id = node.info.node_id;
  idl::NodeStatus s;
  s.__set_info(node.info);
  s.__set_node_epoch(node.node_epoch);
  const auto state = detector_.state(id);
  s.__set_state(node.dead || !state ? idl::NodeState::DEAD : *state);
  const auto age = detector_.since_heartbeat(id);
  s.__set_last_heartbeat_ms_ago(age ? std::chrono::duration_cast<std::chrono::milliseconds>(*age).count()
                                    : std::int64_t{-1});
  if (auto it = stats_.find(id); it != stats_.end()) s.__set_stats(it->second);
  auto it = counts.find(id);
  s.__set_replicas(it == counts.end() ? 0 : static_cast<std::int32_t>(it->second));
  s.__set_drain(node.drain);
  std::int32_t ranges = 0;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      ranges += static_cast<std::int32_t>(
          std::count_if(route.sealed.begin(), route.sealed.end(),
                        [&](const idl::SealedRange& range) { return has_node(range.replicas, id); }));
    }
  }
  s.__set_sealed_ranges(ranges);
  return s;
}

Result<idl::NodeStatus> Controller::drain_node(const std::string& node_id) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto* node = node_locked(node_id);
  if (node == nullptr) {
    return make_error(idl::ErrorCode::UNKNOWN_NODE,
                      fmt::format("no node '{}' (see `catena status`)", node_id));
  }
  if (node->dead) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("{} is DEAD: its chains are repaired without it; nothing to drain", node_id));
  }
  if (node->drain != idl::DrainState::SERVING) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("{} is already {}{}", node_id, drain_name(node->drain),
                                  node->drain == idl::DrainState::DRAINING
                                      ? ": a drain of it is running (see `catena status`)"
                                      : "; it can be stopped"));
  }
  // History only it holds: sealed ranges whose records have not expired and
  // that no other live, serving member holds.
  std::vector<std::string> only_copy;
  const std::int64_t now = wall_ms();
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      for (const auto& range : route.sealed) {
        if (!has_node(range.replicas, node_id) || range.sealed_at_ms + ch.config.ttl_ms <= now) continue;
        idl::PartitionRoute probe = route;
        probe.sealed = {range};
        if (leave_sealed_ranges_locked(probe, node_id)) continue;  // shared
        only_copy.push_back(fmt::format("{}/{} [{}, {}) until {} ms after the epoch", route.channel,
                                        route.partition, range.start_offset, range.end_offset,
                                        range.sealed_at_ms + ch.config.ttl_ms));
      }
    }
  }
  if (!only_copy.empty()) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("{} holds the only live copy of sealed range(s) {}; drain it once they "
                                  "expire (or another of their members is back)",
                                  node_id, fmt::join(only_copy, ", ")));
  }
  // Every chain it is in needs a replacement, in a zone that keeps the
  // chain's zone spread.
  std::vector<PlacementCandidate> others;
  for (auto& c : candidates_locked()) {
    if (c.node_id != node_id) others.push_back(std::move(c));
  }
  Placement placement(std::move(others));
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      if (!has_node(route.replicas, node_id)) continue;
      std::set<std::string> members;
      std::vector<std::string> zones;
      std::set<std::string> spread_before, spread_after;
      for (const auto* r : members_of(route)) {
        members.insert(r->node_id);
        const auto* n = node_locked(r->node_id);
        const std::string zone = n != nullptr ? n->info.zone : std::string();
        spread_before.insert(zone);
        if (r->node_id == node_id || draining_locked(r->node_id)) continue;
        zones.push_back(zone);
        spread_after.insert(zone);
      }
      members.merge(placement_refused_locked(route.channel));  // its tenant's zones only
      auto chosen = placement.choose(1, zones, members);
      if (!chosen) {
        return make_error(idl::ErrorCode::NOT_ENOUGH_NODES,
                          fmt::format("{}/{} has no node to take {}'s place: {}", route.channel,
                                      route.partition, node_id, chosen.error().message));
      }
      for (const auto& c : placement.candidates()) {
        if (c.node_id == chosen->front()) spread_after.insert(c.zone);
      }
      if (spread_after.size() < spread_before.size()) {
        return make_error(idl::ErrorCode::NOT_ENOUGH_NODES,
                          fmt::format("{} is the last serving node of zone '{}' and {}/{} spans it: draining "
                                      "it would leave that chain in {} zone(s) instead of {}; add a node in "
                                      "zone '{}' first",
                                      node_id, node->info.zone, route.channel, route.partition,
                                      spread_after.size(), spread_before.size(), node->info.zone));
      }
    }
  }
  meta::NodeRecord record_node = *node;
  record_node.__set_drain(idl::DrainState::DRAINING);
  meta::MetaRecord record;
  record.__set_put_node(record_node);
  if (auto r = store_->commit(record); !r) return r.error();
  const auto counts = replica_counts_locked();
  const auto held = counts.find(node_id);
  spdlog::warn("node {} is DRAINING: each of its {} replica(s) gets a replacement; it takes no new ones",
               node_id, held == counts.end() ? 0 : held->second);
  if (crash_locked("drain.begun")) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
  return node_status_locked(*node_locked(node_id), counts);
}

Result<idl::RebalancePlan> Controller::add_node(const std::string& node_id, bool dry_run) {
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    const auto* node = node_locked(node_id);
    if (node == nullptr) {
      return make_error(idl::ErrorCode::UNKNOWN_NODE,
                        fmt::format("no node '{}' has registered (start catenad with --controller pointing "
                                    "here and --node-id {})",
                                    node_id, node_id));
    }
    const auto state = detector_.state(node_id);
    if (node->dead || !state || *state != idl::NodeState::ALIVE) {
      const bool suspect = !node->dead && state && *state == idl::NodeState::SUSPECT;
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("{} is {}: it takes partitions once it is ALIVE (heartbeating)", node_id,
                                    suspect ? "SUSPECT" : "DEAD"));
    }
    if (node->drain != idl::DrainState::SERVING) {
      return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                        fmt::format("{} is {}: it takes no partitions", node_id,
                                    node->drain == idl::DrainState::DRAINING ? "DRAINING" : "DRAINED"));
    }
  }
  // Between here and the plan the node may fail: the plan then leaves it
  // out, and move_partition() refuses a target that is not ALIVE.
  spdlog::info("node {} joins: rebalancing{}", node_id, dry_run ? " (dry run)" : "");
  return rebalance(dry_run);
}

Result<idl::RebalancePlan> Controller::rebalance(bool dry_run, RebalanceScope scope) {
  MutexLock rebalance_lock(rebalance_mu_);
  std::vector<RebalanceMove> moves;
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    std::vector<RebalanceNode> nodes;
    for (const auto& [id, node] : store_->state().nodes) {
      if (node.dead) continue;
      nodes.push_back(RebalanceNode{id, node.info.zone,
                                    detector_.is_alive(id) && node.drain == idl::DrainState::SERVING});
    }
    std::vector<RebalanceChain> chains;
    for (const auto& [name, ch] : store_->state().channels) {
      const auto moving = store_->state().moves.find(name);
      for (const auto& route : ch.routes) {
        // Only settled chains: not under repair, a move or a drain.
        if (route.replicas.empty() || !route.joining.empty() || !fully_acked_locked(route)) continue;
        if (moving != store_->state().moves.end() && moving->second.count(route.partition) != 0) continue;
        RebalanceChain c{route.channel, route.partition, {}};
        bool settled = true;
        for (const auto& r : route.replicas) {
          c.replicas.push_back(r.node_id);
          settled = settled && !draining_locked(r.node_id);
        }
        if (settled) chains.push_back(std::move(c));
      }
    }
    moves = plan_rebalance(nodes, chains, scope);
    // A tenant's chain never moves outside its zones (the plan balances
    // counts, not policies): such a move is left out.
    std::vector<RebalanceMove> allowed;
    for (auto& m : moves) {
      bool within = true;
      for (const auto& id : m.to) within = within && placement_allowed_locked(m.channel, id);
      if (within) allowed.push_back(std::move(m));
    }
    moves = std::move(allowed);
  }
  idl::RebalancePlan plan;
  plan.__set_dry_run(dry_run);
  for (const auto& m : moves) {
    idl::PlannedMove pm;
    pm.__set_channel(m.channel);
    pm.__set_partition(m.partition);
    pm.__set_current(m.from);
    pm.__set_to(m.to);
    pm.__set_reason(m.reason);
    if (!dry_run) {
      // One at a time: each is a handoff that seals the old head briefly.
      if (auto r = move_partition(m.channel, m.partition, m.to); !r) pm.__set_error(r.error().describe());
    }
    plan.moves.push_back(std::move(pm));
  }
  plan.__isset.moves = true;
  // The periodic role balance says nothing when it found nothing to do.
  if (scope == RebalanceScope::replicas_and_roles || !plan.moves.empty()) {
    spdlog::info("{}{}: {} move(s)", scope == RebalanceScope::roles ? "role balance" : "rebalance",
                 dry_run ? " (dry run)" : "", plan.moves.size());
  }
  return plan;
}

}  // namespace catena::control
