// Controller: chain repair. Evicting a node (fenced and the repair on file in
// one record), removing it from its chains, restoring replication with
// joining replicas, promoting them once caught up, returning or rebuilding a
// chain's last member, the high-water marks a rebuilt chain starts above,
// and closing finished repairs. Runs from tick() (and register_node).
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <map>
#include <set>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include <catena/control/controller.hpp>

#include "route_members.hpp"

namespace catena::control {

using route_members::contains;
using route_members::describe_chain;
using route_members::erase_node;
using route_members::has_node;
using route_members::members_of;
using route_members::role_in;

std::vector<PlacementCandidate> Controller::candidates_locked() const {
  const auto counts = replica_counts_locked();
  // Roles in the chains as they will be once their joining members are
  // promoted: the last joining member is the tail to be.
  std::map<std::string, ChainRoles> roles;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      std::vector<std::string> line;
      for (const auto* r : members_of(route)) line.push_back(r->node_id);
      add_roles(line, roles);
    }
  }
  std::vector<PlacementCandidate> out;
  for (const auto& [id, node] : store_->state().nodes) {
    if (node.dead || !detector_.is_alive(id) || node.drain != idl::DrainState::SERVING) continue;
    PlacementCandidate c{id, node.info.zone, 0, 0, 0, node.info.datacenter};
    if (auto it = counts.find(id); it != counts.end()) c.replicas = it->second;
    if (auto it = roles.find(id); it != roles.end()) {
      c.heads = it->second.heads;
      c.tails = it->second.tails;
    }
    if (auto it = stats_.find(id); it != stats_.end()) {
      c.segments = it->second.segments;
      c.bytes = it->second.bytes;
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::int64_t Controller::rebuilt_start_offset(std::int64_t high_water) {
  return (high_water / kOffsetGeneration + 1) * kOffsetGeneration;
}

bool Controller::caught_up_locked(const idl::PartitionRoute& route) const {
  if (route.replicas.empty() || route.joining.empty()) return false;
  auto it = stats_.find(route.replicas.back().node_id);
  if (it == stats_.end()) return false;
  for (const auto& p : it->second.partitions) {
    if (p.channel != route.channel || p.partition != route.partition) continue;
    // Only a report at this epoch is about the link to joining[0]. A small
    // backlog is not enough: records the tail committed before it began to
    // sync joining[0] may be missing there, and the promoted tail would be a
    // member without every acknowledged record.
    return p.epoch == route.epoch && p.successor_synced;
  }
  return false;
}

Result<void> Controller::evict_locked(const std::string& node_id, const std::string& reason,
                                      bool fence_evicted) {
  const auto* current = node_locked(node_id);
  if (current == nullptr || current->dead) return {};
  // From here on no heartbeat renews its lease (the detector's verdict held
  // it already, other evictions start here): the commit below may wait for
  // ZooKeeper, and heartbeats are answered meanwhile without mu_.
  detector_.hold(node_id);
  meta::NodeRecord node = *current;
  node.__set_dead(true);

  meta::RepairIntent intent;
  intent.__set_id(store_->state().next_intent_id);
  intent.__set_node_id(node_id);
  intent.__set_node_epoch(node.node_epoch);
  intent.__set_reason(reason);
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      if (!contains(route, node_id)) continue;
      meta::RouteKey key;
      key.__set_channel(name);
      key.__set_partition(route.partition);
      intent.routes.push_back(std::move(key));
    }
  }
  intent.__isset.routes = true;

  // One atomic record: the node is fenced and the repair is on file before
  // any chain changes, so a crash from here on resumes the repair.
  meta::MetaRecord record;
  record.__set_put_node(node);
  record.__set_begin_repair(intent);
  record.__set_next_intent_id(intent.id + 1);
  if (auto r = store_->commit(record); !r) return r;
  spdlog::warn("node {} (epoch {}) is DEAD: {}; fenced, repairing {} chain(s)", node_id, node.node_epoch,
               reason, intent.routes.size());
  detector_.forget(node_id);
  forget_rejoiner_locked(node_id);
  stats_.erase(node_id);
  backoff_.erase(node_id);
  if (crash_locked("repair.intent_written")) return make_error(idl::ErrorCode::INTERNAL, "halted");
  return remove_from_routes_locked(intent, fence_evicted);
}

Result<void> Controller::remove_from_routes_locked(const meta::RepairIntent& intent, bool fence_evicted) {
  // Only the incarnation the intent is about: if the id re-registered since,
  // the new incarnation may legitimately be in chains again.
  const auto* node = node_locked(intent.node_id);
  if (node == nullptr || !node->dead || node->node_epoch != intent.node_epoch) return {};
  std::vector<idl::PartitionRoute> changed;
  for (const auto& key : intent.routes) {
    auto route = route_locked(key.channel, key.partition);
    if (!route || !contains(**route, intent.node_id)) continue;
    idl::PartitionRoute next = **route;
    const auto role = role_in(next, intent.node_id);
    // A joining node simply leaves; the others re-link around whatever left
    // (replica_config_for derives every neighbour from the route).
    if (next.replicas.size() == 1 && next.replicas.front().node_id == intent.node_id) {
      // Every member of the chain holds every acknowledged record; joining
      // replicas do not. The last one stays until it registers again with
      // its data or without it (return_last_members_locked); until then the
      // partition is unavailable, never reset.
      spdlog::error(
          "{}/{}: {} is the last replica holding every acknowledged record; it stays in the chain and "
          "the partition is unavailable until it is back",
          next.channel, next.partition, intent.node_id);
      continue;
    }
    if (has_node(next.replicas, intent.node_id)) note_lost_member_locked(next, intent.node_id);
    erase_node(next.replicas, intent.node_id);
    erase_node(next.joining, intent.node_id);
    next.__set_epoch(next.epoch + 1);
    spdlog::info("{}/{}: dropped {} ({}), epoch {}: {}", next.channel, next.partition, intent.node_id, role,
                 next.epoch, describe_chain(next));
    changed.push_back(std::move(next));
  }
  if (changed.empty()) return {};
  meta::MetaRecord record;
  record.__set_put_routes(changed);
  if (auto r = store_->commit(record); !r) return r;
  // Best effort: if the evicted node is in fact alive, tell it to stop.
  for (const auto& route : changed) {
    if (!fence_evicted) break;
    fences_.push_back(FenceJob{broker_target_locked(intent.node_id, node->info.admin_addr), route.channel,
                               route.partition, route.epoch});
  }
  if (crash_locked("repair.removed")) return make_error(idl::ErrorCode::INTERNAL, "halted");
  return {};
}

Result<void> Controller::finish_removals_locked(const std::string& node_id) {
  const auto intents = store_->state().intents;
  for (const auto& [id, intent] : intents) {
    if (intent.node_id != node_id) continue;
    if (auto r = remove_from_routes_locked(intent, /*fence_evicted=*/false); !r) return r;
  }
  return {};
}

void Controller::restore_replication_locked() {
  Placement placement(candidates_locked());
  std::vector<idl::PartitionRoute> changed;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      const auto missing = missing_replicas_locked(route, ch.config.replication);
      if (missing <= 0) {
        drop_rejoiners_locked(route);  // restored without them
        continue;
      }
      // Wait until the shortened chain is installed everywhere: each replica
      // sees epoch+1 (without the dead node) before epoch+2 (with the
      // replacement joining).
      if (!fully_acked_locked(route)) continue;
      // A node back with the data it kept comes first: it copies only what
      // it lacks. Placement picks the rest, unless the chain still waits
      // for the member it lost to come back.
      std::vector<std::string> chosen = take_rejoiners_locked(route, missing);
      const auto still_missing = missing - static_cast<std::int32_t>(chosen.size());
      if (still_missing > 0 && !awaiting_lost_member_locked(route)) {
        std::vector<std::string> zones;
        std::set<std::string> members(chosen.begin(), chosen.end());
        // Never outside its tenant's zones: the chain stays short instead.
        members.merge(placement_refused_locked(route.channel));
        for (const auto* r : members_of(route)) {
          members.insert(r->node_id);
          if (draining_locked(r->node_id)) continue;  // its zone is free for the replacement
          if (const auto* n = node_locked(r->node_id)) zones.push_back(n->info.zone);
        }
        for (const auto& id : chosen) zones.push_back(node_locked(id)->info.zone);
        const auto prefer = preference_for_locked(route);
        auto placed = placement.choose(still_missing, zones, members, prefer);
        if (!placed) {
          if (warned_short_.insert({{route.channel, route.partition}, route.epoch}).second) {
            spdlog::warn("{}/{} has {} of {} replicas and cannot be restored yet: {}", route.channel,
                         route.partition, route.replicas.size() + route.joining.size(), ch.config.replication,
                         placed.error().message);
          }
          if (chosen.empty()) continue;
        } else {
          count_replacements_locked(route, prefer, *placed);
          chosen.insert(chosen.end(), placed->begin(), placed->end());
          lost_members_.erase({route.channel, route.partition});
        }
      }
      if (chosen.empty()) continue;
      // With a chain left, replacements join behind its tail and copy while
      // it keeps committing; promote_caught_up_locked() makes them replicas.
      // Without one there is nothing to copy: they form the chain directly.
      // A chain is empty only once its last member proved its data lost
      // (return_last_members_locked): it starts again above every offset
      // ever handed out.
      const bool empty = route.replicas.empty();
      idl::PartitionRoute next = route;
      if (empty) {
        next.__set_start_offset(rebuilt_start_offset(
            std::max(route.start_offset, high_water_locked(route.channel, route.partition))));
        spdlog::error("{}/{} lost every replica; rebuilding it empty from offset {}", route.channel,
                      route.partition, next.start_offset);
      }
      for (const auto& id : chosen) {
        const auto* n = node_locked(id);
        idl::Replica r;
        r.__set_node_id(id);
        r.__set_fabric_addr(n->info.fabric_addr);
        r.__set_admin_addr(n->info.admin_addr);
        r.__set_node_epoch(n->node_epoch);
        (empty ? next.replicas : next.joining).push_back(std::move(r));
      }
      next.__set_epoch(route.epoch + 1);
      if (empty) {
        spdlog::info("{}/{}: {} form the chain, epoch {}: {}", next.channel, next.partition,
                     fmt::join(chosen, ", "), next.epoch, describe_chain(next));
      } else {
        spdlog::info("{}/{}: {} joining behind the tail, epoch {}: {}", next.channel, next.partition,
                     fmt::join(chosen, ", "), next.epoch, describe_chain(next));
      }
      changed.push_back(std::move(next));
    }
  }
  if (changed.empty()) return;
  meta::MetaRecord record;
  record.__set_put_routes(changed);
  if (auto r = store_->commit(record); !r) {
    spdlog::error("could not persist restored chains (will retry): {}", r.error().describe());
    return;
  }
  crash_locked("repair.restored");
}

void Controller::return_last_members_locked(const meta::NodeRecord& node,
                                            const std::vector<idl::PartitionProgress>& held,
                                            std::vector<idl::PartitionRoute>* changed) {
  const std::string& id = node.info.node_id;
  auto holds = [&](const idl::PartitionRoute& route) {
    return std::any_of(held.begin(), held.end(), [&](const idl::PartitionProgress& p) {
      return p.channel == route.channel && p.partition == route.partition;
    });
  };
  std::set<RouteId> member_of;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      if (!has_node(route.replicas, id)) continue;
      // Only the kept last member of a chain is still in it here.
      idl::PartitionRoute next = route;
      next.__set_epoch(route.epoch + 1);
      if (holds(route)) {
        auto& r = next.replicas.front();
        r.__set_fabric_addr(node.info.fabric_addr);
        r.__set_admin_addr(node.info.admin_addr);
        r.__set_node_epoch(node.node_epoch);  // the new incarnation, which kept the data
        member_of.insert({route.channel, route.partition});
        spdlog::warn("{}/{}: {}, its last replica, is back with its data: the chain again, epoch {}: {}",
                     route.channel, route.partition, id, next.epoch, describe_chain(next));
      } else {
        next.replicas.clear();
        for (const auto& j : next.joining) {
          if (const auto* n = node_locked(j.node_id); n != nullptr && !n->dead) {
            fences_.push_back(FenceJob{broker_target_locked(j.node_id, n->info.admin_addr), route.channel,
                                       route.partition, next.epoch});
          }
        }
        next.joining.clear();
        spdlog::error(
            "{}/{}: {}, its last replica, registered again without its data: every copy is gone; the "
            "chain is rebuilt above offset {}",
            route.channel, route.partition, id, high_water_locked(route.channel, route.partition));
      }
      changed->push_back(std::move(next));
    }
  }
  // Replicas of chains it is no longer in: kept for a short chain it may
  // rejoin, dropped otherwise (best effort).
  for (const auto& p : held) {
    if (member_of.count({p.channel, p.partition}) != 0 || keep_for_rejoin_locked(node, p)) continue;
    auto route = route_locked(p.channel, p.partition);
    if (!route) continue;
    fences_.push_back(
        FenceJob{broker_target_locked(id, node.info.admin_addr), p.channel, p.partition, (*route)->epoch});
  }
}

void Controller::note_progress_locked(const idl::NodeStats& stats) {
  for (const auto& p : stats.partitions) {
    if (!route_locked(p.channel, p.partition)) continue;
    if (p.end_offset <= high_water_locked(p.channel, p.partition)) continue;
    raised_high_water_[{p.channel, p.partition}] = p.end_offset;
  }
}

void Controller::background_commit_locked() {
  // Rebuilt chains start a whole offset generation above the mark, so a
  // mark a second (or a restart) behind is as good as a current one: one
  // fsync a second at most under steady traffic, not one per tick.
  // Neither the marks nor the groups' offset commits are waited for under
  // the lock: a ZooKeeper that stops answering (a pause, a crash caught
  // mid-commit) would otherwise hold every heartbeat answer until
  // ZooKeeper is back or the store gives up, and the brokers' leases (so
  // acknowledgements) would lapse. Nothing is sent while the store has no
  // connection, or while the one before is unanswered.
  const auto take_answer = [this] {
    mu_.assert_held();
    switch (store_->background_commit()) {
      case MetadataStore::BackgroundCommit::in_flight:
        return false;
      case MetadataStore::BackgroundCommit::not_applied:
        for (const auto& [rid, offset] : unconfirmed_high_water_) {
          auto& mark = raised_high_water_[rid];
          mark = std::max(mark, offset);
        }
        answer_offsets_locked(sent_offsets_batch_,
                              make_error(idl::ErrorCode::UNAVAILABLE,
                                         "the metadata store did not take the offset commit: commit again"));
        break;
      case MetadataStore::BackgroundCommit::applied:
      case MetadataStore::BackgroundCommit::none:  // nothing sent, or a store that commits at once
        answer_offsets_locked(sent_offsets_batch_, {});
        break;
    }
    unconfirmed_high_water_.clear();
    sent_offsets_.clear();
    return true;
  };
  if (!take_answer()) return;
  // Every offset the batch waited for went with a deleted channel: nothing
  // to send for it (the commit came before the delete).
  if (queued_offsets_.empty()) answer_offsets_locked(queued_offsets_batch_, {});
  const auto now = clock_.now();
  const bool marks_due = !raised_high_water_.empty() && now >= next_high_water_persist_;
  if ((!marks_due && queued_offsets_.empty()) || !store_->connected()) return;
  meta::MetaRecord record;
  if (marks_due) {
    std::map<std::string, std::map<std::int32_t, std::int64_t>> marks;
    for (const auto& [rid, offset] : raised_high_water_) marks[rid.first][rid.second] = offset;
    record.raise_high_water = std::move(marks);  // the generated setter would copy
    record.__isset.raise_high_water = true;
  }
  if (!queued_offsets_.empty()) {
    for (const auto& [key, offset] : queued_offsets_) {
      meta::OffsetCommit commit;
      commit.__set_group(std::get<0>(key));
      commit.__set_channel(std::get<1>(key));
      commit.__set_partition(std::get<2>(key));
      commit.__set_offset(offset);
      record.commit_offsets.push_back(std::move(commit));
    }
    record.__isset.commit_offsets = true;
  }
  if (auto r = store_->commit_in_background(record); !r) {
    spdlog::error("could not persist high-water marks or offset commits (marks: will retry): {}",
                  r.error().describe());
    // The marks are sent again later; the offset commits are answered
    // (their callers commit again).
    queued_offsets_.clear();
    answer_offsets_locked(queued_offsets_batch_, r.error());
    return;
  }
  if (marks_due) {
    next_high_water_persist_ = now + std::chrono::seconds(1);
    unconfirmed_high_water_ = std::move(raised_high_water_);
    raised_high_water_.clear();
  }
  sent_offsets_ = std::move(queued_offsets_);
  queued_offsets_.clear();
  sent_offsets_batch_ = std::move(queued_offsets_batch_);
  queued_offsets_batch_.reset();
  (void)take_answer();  // a store that commits at once has answered already
}

std::int64_t Controller::high_water_locked(const std::string& channel, std::int32_t partition) const {
  std::int64_t mark = 0;
  const auto& hw = store_->state().high_water;
  if (auto c = hw.find(channel); c != hw.end()) {
    if (auto p = c->second.find(partition); p != c->second.end()) mark = p->second;
  }
  for (const auto* marks : {&raised_high_water_, &unconfirmed_high_water_}) {
    if (auto it = marks->find({channel, partition}); it != marks->end()) mark = std::max(mark, it->second);
  }
  return mark;
}

void Controller::promote_caught_up_locked() {
  std::vector<idl::PartitionRoute> changed;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      // Every member runs this epoch (so the tail forwards to joining[0]),
      // and the tail says joining[0] holds all it committed.
      if (route.joining.empty() || !fully_acked_locked(route) || !caught_up_locked(route)) {
        continue;
      }
      idl::PartitionRoute next = route;
      const std::string id = next.joining.front().node_id;
      next.replicas.push_back(next.joining.front());
      next.joining.erase(next.joining.begin());
      next.__set_epoch(route.epoch + 1);
      spdlog::info("{}/{}: {} caught up, now the tail, epoch {}: {}", next.channel, next.partition, id,
                   next.epoch, describe_chain(next));
      drop_drained_member_locked(next);
      changed.push_back(std::move(next));
    }
  }
  if (changed.empty()) return;
  meta::MetaRecord record;
  record.__set_put_routes(changed);
  if (auto r = store_->commit(record); !r) {
    spdlog::error("could not persist promoted chains (will retry): {}", r.error().describe());
    return;
  }
  crash_locked("repair.promoted");
}

void Controller::close_finished_repairs_locked() {
  std::vector<std::int64_t> done;
  for (const auto& [id, intent] : store_->state().intents) {
    // If the id registered again, the removal of this incarnation happened
    // before that (register_node ensures it), and the id in a chain now is
    // the new, empty incarnation added as a replacement.
    const auto* node = node_locked(intent.node_id);
    const bool same_incarnation = node != nullptr && node->dead && node->node_epoch == intent.node_epoch;
    // (intent captured by name: Clang before 16 cannot capture a structured binding.)
    const bool finished = std::all_of(
        intent.routes.begin(), intent.routes.end(), [&, &intent = intent](const meta::RouteKey& key) {
          mu_.assert_held();  // the lambda runs here, under the caller's lock
          auto ch = channel_locked(key.channel);
          if (!ch) return true;  // channel gone
          auto route = route_locked(key.channel, key.partition);
          if (!route) return true;
          return (!same_incarnation || !contains(**route, intent.node_id)) &&
                 static_cast<std::int32_t>((*route)->replicas.size()) >= (*ch)->config.replication &&
                 fully_acked_locked(**route);
        });
    if (finished) done.push_back(id);
  }
  for (const auto id : done) {
    meta::MetaRecord record;
    record.__set_end_repair(id);
    if (auto r = store_->commit(record); !r) {
      spdlog::error("could not close repair {}: {}", id, r.error().describe());
      return;
    }
    spdlog::info("repair {} finished: every affected chain is back to full replication", id);
  }
}

}  // namespace catena::control
