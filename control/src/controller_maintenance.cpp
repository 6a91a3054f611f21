// Controller: failure detection, chain repair and configuration pushes.
// Everything here runs from tick() (one maintenance thread), except
// run_pushes(), which create_channel() also calls.
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <future>
#include <spdlog/spdlog.h>
#include <vector>

#include <catena/control/controller.hpp>

#include "link_secret.hpp"

namespace catena::control {
namespace {

// "a -> b -> c", then " (joining: d)" if any are joining, for logs.
std::string describe_chain(const idl::PartitionRoute& route) {
  std::vector<std::string> ids;
  for (const auto& r : route.replicas) ids.push_back(r.node_id);
  std::string out = fmt::format("[{}]", fmt::join(ids, " -> "));
  if (route.joining.empty()) return out;
  ids.clear();
  for (const auto& r : route.joining) ids.push_back(r.node_id);
  return out + fmt::format(" (joining: {})", fmt::join(ids, " -> "));
}

bool has_node(const std::vector<idl::Replica>& list, const std::string& node_id) {
  return std::any_of(list.begin(), list.end(), [&](const idl::Replica& r) { return r.node_id == node_id; });
}

// In the chain or joining it.
bool contains(const idl::PartitionRoute& route, const std::string& node_id) {
  return has_node(route.replicas, node_id) || has_node(route.joining, node_id);
}

void erase_node(std::vector<idl::Replica>& list, const std::string& node_id) {
  std::erase_if(list, [&](const idl::Replica& r) { return r.node_id == node_id; });
}

// Every node that holds (or is copying) the partition and must be pushed
// its route: the chain, then the joining replicas.
std::vector<const idl::Replica*> members_of(const idl::PartitionRoute& route) {
  std::vector<const idl::Replica*> out;
  for (const auto& r : route.replicas) out.push_back(&r);
  for (const auto& r : route.joining) out.push_back(&r);
  return out;
}

// Members, then the nodes of sealed ranges that are not members (they are
// told the route so that they keep their range read-only).
std::vector<const idl::Replica*> push_targets_of(const idl::PartitionRoute& route) {
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

std::string role_in(const idl::PartitionRoute& route, const std::string& node_id) {
  if (has_node(route.joining, node_id)) return "joining";
  if (route.replicas.size() == 1) return "only replica";
  if (route.replicas.front().node_id == node_id) return "head";
  if (route.replicas.back().node_id == node_id) return "tail";
  return "middle";
}

}  // namespace

std::vector<PlacementCandidate> Controller::candidates_locked() const {
  const auto counts = replica_counts_locked();
  std::vector<PlacementCandidate> out;
  for (const auto& [id, node] : store_->state().nodes) {
    if (node.dead || !detector_.is_alive(id)) continue;
    PlacementCandidate c{id, node.info.zone, 0, 0, 0};
    if (auto it = counts.find(id); it != counts.end()) c.replicas = it->second;
    if (auto it = stats_.find(id); it != stats_.end()) {
      c.segments = it->second.segments;
      c.bytes = it->second.bytes;
    }
    out.push_back(std::move(c));
  }
  return out;
}

bool Controller::fully_acked_locked(const idl::PartitionRoute& route) const {
  const auto members = members_of(route);
  if (members.empty()) return true;  // nobody to wait for (an older epoch's acks may linger)
  auto it = acks_.find({route.channel, route.partition});
  if (it == acks_.end() || it->second.epoch != route.epoch) return false;
  return std::all_of(members.begin(), members.end(),
                     [&](const idl::Replica* r) { return it->second.nodes.count(r->node_id) != 0; });
}

std::int64_t Controller::rebuilt_start_offset(std::int64_t high_water) {
  return (high_water / kOffsetGeneration + 1) * kOffsetGeneration;
}

std::int64_t Controller::promote_backlog_limit(std::int64_t segment_bytes) {
  return std::max<std::int64_t>(std::int64_t{1} << 20, segment_bytes / 4);
}

bool Controller::caught_up_locked(const idl::PartitionRoute& route, std::int64_t segment_bytes) const {
  if (route.replicas.empty() || route.joining.empty()) return false;
  auto it = stats_.find(route.replicas.back().node_id);
  if (it == stats_.end()) return false;
  for (const auto& p : it->second.partitions) {
    if (p.channel != route.channel || p.partition != route.partition) continue;
    // Only a report at this epoch is about the link to joining[0].
    return p.epoch == route.epoch && p.successor_backlog_bytes >= 0 &&
           p.successor_backlog_bytes <= promote_backlog_limit(segment_bytes);
  }
  return false;
}

void Controller::tick() {
  MutexLock tick_lock(tick_mu_);
  {
    MutexLock lock(mu_);
    if (halted_) return;
  }
  run_probes();
  {
    MutexLock lock(mu_);
    if (halted_) return;
    persist_high_water_locked();
    act_on_link_faults_locked();
    if (halted_) return;
    promote_caught_up_locked();
    if (halted_) return;
    restore_replication_locked();
    if (halted_) return;
  }
  run_pushes();
  MutexLock lock(mu_);
  if (!halted_) close_finished_repairs_locked();
}

void Controller::run_probes() {
  std::vector<std::pair<FailureDetector::Probe, BrokerTarget>> probes;
  {
    MutexLock lock(mu_);
    (void)isolated_locked();  // logs when the controller loses or regains the cluster
    for (auto& probe : detector_.due_probes()) {
      const auto* node = node_locked(probe.node_id);
      if (node == nullptr) continue;
      probes.emplace_back(probe, BrokerTarget{probe.node_id, node->info.admin_addr});
    }
  }
  if (probes.empty()) return;
  // Probe in parallel: each may take up to the probe timeout.
  std::vector<std::future<Result<idl::NodeStats>>> answers;
  for (const auto& [probe, target] : probes) {
    answers.push_back(std::async(std::launch::async, [this, to = target] { return brokers_.ping(to); }));
  }
  MutexLock lock(mu_);
  for (std::size_t i = 0; i < probes.size(); ++i) {
    const auto& [probe, target] = probes[i];
    auto answer = answers[i].get();
    if (halted_) continue;  // drain the futures, act on none
    if (!answer) {
      spdlog::warn("probe of {} at {} failed: {}", probe.node_id, target.admin_addr,
                   answer.error().describe());
    } else {
      stats_[probe.node_id] = *answer;
      note_progress_locked(*answer);
    }
    const auto verdict = detector_.probe_result(probe.node_id, probe.node_epoch, answer.ok());
    if (verdict == FailureDetector::Verdict::unheard) {
      // It answers us, we do not hear it: its lease lapsed long ago and its
      // chains stall until its heartbeats get through. Repair them instead.
      if (isolated_locked()) continue;
      const auto heard = detector_.since_heard(probe.node_id).value_or(Clock::duration{});
      const auto reason = fmt::format(
          "answers probes but none of its heartbeats arrived for {} ms (its lease lapsed): an asymmetric cut",
          std::chrono::duration_cast<std::chrono::milliseconds>(heard).count());
      if (auto r = evict_locked(probe.node_id, reason, /*fence_evicted=*/true); !r && !halted_) {
        spdlog::error("could not evict {}: {} (will retry)", probe.node_id, r.error().describe());
      }
      continue;
    }
    if (verdict != FailureDetector::Verdict::dead) continue;
    // The node stays SUSPECT and is probed again; a heartbeat or an answered
    // probe clears it, as if it had never been silent.
    if (isolated_locked()) continue;
    if (const auto quiet = detector_.since_heartbeat(probe.node_id);
        quiet && *quiet <= Clock::duration(options_.lease + options_.heartbeat_interval)) {
      spdlog::info("{} failed its probes but its lease may still be valid: not evicting it yet",
                   probe.node_id);
      continue;
    }
    const auto reason =
        fmt::format("failed {} probe(s) in a row, last: {}", options_.probe_attempts, answer.error().message);
    if (auto r = evict_locked(probe.node_id, reason, /*fence_evicted=*/true); !r && !halted_) {
      spdlog::error("could not evict {}: {} (will retry)", probe.node_id, r.error().describe());
    }
  }
}

void Controller::note_link_fault_locked(const idl::FailureReport& report, const idl::PartitionRoute& route) {
  // Only the suspect's predecessor on this route epoch: the one that writes
  // to it (the tail, for a joining replica).
  auto at = [&](const std::string& id) {
    for (std::size_t i = 0; i < route.replicas.size(); ++i) {
      if (route.replicas[i].node_id == id) return static_cast<int>(i);
    }
    return has_node(route.joining, id) ? static_cast<int>(route.replicas.size()) : -1;
  };
  const int reporter = at(report.reporter);
  const int suspect = at(report.suspect_node_id);
  if (reporter < 0 || suspect != reporter + 1 || report.epoch != route.epoch) return;
  const auto now = clock_.now();
  auto& f = link_faults_[{{route.channel, route.partition}, report.suspect_node_id}];
  // A gap of half the timeout between reports ends a fault: the link came back.
  if (f.reports == 0 || f.reporter != report.reporter || f.epoch != route.epoch ||
      now - f.last > Clock::duration(options_.link_fault_timeout) / 2) {
    f = LinkFault{report.reporter, route.epoch, now, now, 0, {}};
  }
  f.last = now;
  ++f.reports;
  f.reason = report.reason;
}

void Controller::act_on_link_faults_locked() {
  const auto now = clock_.now();
  const auto timeout = Clock::duration(options_.link_fault_timeout);
  for (auto it = link_faults_.begin(); it != link_faults_.end();) {
    const auto& [key, f] = *it;
    const auto& [route_id, suspect] = key;
    auto route = route_locked(route_id.first, route_id.second);
    const auto* node = node_locked(suspect);
    // Over: the chain changed, the suspect is gone, or the reports stopped.
    if (!route || (*route)->epoch != f.epoch || node == nullptr || node->dead || now - f.last > timeout / 2) {
      it = link_faults_.erase(it);
      continue;
    }
    // Not yet: the reports do not span the timeout yet, or the probes have
    // not cleared the suspect (then they decide, as for any other report).
    if (f.last - f.first < timeout || !detector_.is_alive(suspect) || isolated_locked()) {
      ++it;
      continue;
    }
    const auto last_eviction = link_evictions_.find(f.reporter);
    const bool reporter_again =
        last_eviction != link_evictions_.end() && now - last_eviction->second < 10 * timeout;
    const std::string victim = reporter_again ? f.reporter : suspect;
    const auto reason = fmt::format(
        "{}/{}: {} could not use its data-plane link to {} for {} ms ({} reports, last: {}) while {} "
        "answered "
        "every probe{}",
        route_id.first, route_id.second, f.reporter, suspect,
        std::chrono::duration_cast<std::chrono::milliseconds>(f.last - f.first).count(), f.reports, f.reason,
        suspect,
        reporter_again
            ? fmt::format("; {}'s reports evicted a node shortly before, so it is the common factor",
                          f.reporter)
            : std::string());
    link_evictions_[f.reporter] = now;
    it = link_faults_.erase(it);
    if (auto r = evict_locked(victim, reason, /*fence_evicted=*/true); !r) {
      if (!halted_) spdlog::error("could not evict {}: {} (will retry)", victim, r.error().describe());
      return;
    }
    if (halted_) return;
  }
}

bool Controller::isolated_locked() {
  const auto tracked = detector_.tracked();
  const auto silent = detector_.silent();
  const bool isolated =
      tracked > 0 && silent * 100 > static_cast<std::size_t>(options_.isolation_percent) * tracked;
  if (isolated && !isolated_) {
    spdlog::error(
        "{} of {} nodes went silent at once (more than {}%): this controller is most likely the one cut "
        "off; evicting nobody until they are heard from again",
        silent, tracked, options_.isolation_percent);
  } else if (!isolated && isolated_) {
    spdlog::warn("{} of {} nodes silent now: evictions allowed again", silent, tracked);
  }
  isolated_ = isolated;
  return isolated;
}

Result<void> Controller::evict_locked(const std::string& node_id, const std::string& reason,
                                      bool fence_evicted) {
  const auto* current = node_locked(node_id);
  if (current == nullptr || current->dead) return {};
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
    fences_.push_back(FenceJob{BrokerTarget{intent.node_id, node->info.admin_addr}, route.channel,
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
      const auto missing = ch.config.replication - static_cast<std::int32_t>(route.replicas.size()) -
                           static_cast<std::int32_t>(route.joining.size());
      // Wait until the shortened chain is installed everywhere: each replica
      // sees epoch+1 (without the dead node) before epoch+2 (with the
      // replacement joining).
      if (missing <= 0 || !fully_acked_locked(route)) continue;
      std::vector<std::string> zones;
      std::set<std::string> members;
      for (const auto* r : members_of(route)) {
        members.insert(r->node_id);
        if (const auto* n = node_locked(r->node_id)) zones.push_back(n->info.zone);
      }
      auto chosen = placement.choose(missing, zones, members);
      if (!chosen) {
        if (warned_short_.insert({{route.channel, route.partition}, route.epoch}).second) {
          spdlog::warn("{}/{} has {} of {} replicas and cannot be restored yet: {}", route.channel,
                       route.partition, route.replicas.size() + route.joining.size(), ch.config.replication,
                       chosen.error().message);
        }
        continue;
      }
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
      for (const auto& id : *chosen) {
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
                     fmt::join(*chosen, ", "), next.epoch, describe_chain(next));
      } else {
        spdlog::info("{}/{}: {} joining behind the tail, epoch {}: {}", next.channel, next.partition,
                     fmt::join(*chosen, ", "), next.epoch, describe_chain(next));
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
            fences_.push_back(FenceJob{BrokerTarget{j.node_id, n->info.admin_addr}, route.channel,
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
  // Replicas of chains it is no longer in: drop them (best effort).
  for (const auto& p : held) {
    if (member_of.count({p.channel, p.partition}) != 0) continue;
    auto route = route_locked(p.channel, p.partition);
    if (!route) continue;
    fences_.push_back(
        FenceJob{BrokerTarget{id, node.info.admin_addr}, p.channel, p.partition, (*route)->epoch});
  }
}

void Controller::note_progress_locked(const idl::NodeStats& stats) {
  for (const auto& p : stats.partitions) {
    if (!route_locked(p.channel, p.partition)) continue;
    if (p.end_offset <= high_water_locked(p.channel, p.partition)) continue;
    raised_high_water_[{p.channel, p.partition}] = p.end_offset;
  }
}

void Controller::persist_high_water_locked() {
  // Rebuilt chains start a whole offset generation above the mark, so a
  // mark a second (or a restart) behind is as good as a current one: one
  // fsync a second at most under steady traffic, not one per tick.
  const auto now = clock_.now();
  if (raised_high_water_.empty() || now < next_high_water_persist_) return;
  next_high_water_persist_ = now + std::chrono::seconds(1);
  meta::MetaRecord record;
  std::map<std::string, std::map<std::int32_t, std::int64_t>> marks;
  for (const auto& [rid, offset] : raised_high_water_) marks[rid.first][rid.second] = offset;
  record.__set_raise_high_water(std::move(marks));
  if (auto r = store_->commit(record); !r) {
    spdlog::error("could not persist high-water marks (will retry): {}", r.error().describe());
    return;
  }
  raised_high_water_.clear();
}

std::int64_t Controller::high_water_locked(const std::string& channel, std::int32_t partition) const {
  std::int64_t mark = 0;
  const auto& hw = store_->state().high_water;
  if (auto c = hw.find(channel); c != hw.end()) {
    if (auto p = c->second.find(partition); p != c->second.end()) mark = p->second;
  }
  if (auto it = raised_high_water_.find({channel, partition}); it != raised_high_water_.end()) {
    mark = std::max(mark, it->second);
  }
  return mark;
}

void Controller::promote_caught_up_locked() {
  std::vector<idl::PartitionRoute> changed;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      // Every member runs this epoch (so the tail forwards to joining[0]),
      // and the tail says joining[0] is nearly level with it.
      if (route.joining.empty() || !fully_acked_locked(route) ||
          !caught_up_locked(route, ch.config.segment_bytes)) {
        continue;
      }
      idl::PartitionRoute next = route;
      const std::string id = next.joining.front().node_id;
      next.replicas.push_back(next.joining.front());
      next.joining.erase(next.joining.begin());
      next.__set_epoch(route.epoch + 1);
      spdlog::info("{}/{}: {} caught up, now the tail, epoch {}: {}", next.channel, next.partition, id,
                   next.epoch, describe_chain(next));
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

std::vector<Controller::PushJob> Controller::collect_pushes_locked() {
  const auto now = clock_.now();
  std::vector<PushJob> jobs;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      const RouteId rid{route.channel, route.partition};
      const auto ack = acks_.find(rid);
      const meta::Handoff* handoff = nullptr;
      if (auto h = store_->state().handoffs.find(route.channel); h != store_->state().handoffs.end()) {
        if (auto p = h->second.find(route.partition);
            p != h->second.end() && p->second.epoch == route.epoch) {
          handoff = &p->second;
        }
      }
      for (const auto* member : push_targets_of(route)) {
        const auto& replica = *member;
        if (ack != acks_.end() && ack->second.epoch == route.epoch &&
            ack->second.nodes.count(replica.node_id)) {
          continue;
        }
        const auto* node = node_locked(replica.node_id);
        if (node == nullptr || node->dead) continue;
        if (auto b = backoff_.find(replica.node_id); b != backoff_.end() && now < b->second.next_attempt)
          continue;
        if (!pushing_.insert({replica.node_id, rid}).second) continue;  // another thread is on it
        idl::ChainAssignment a;
        a.__set_route(route);
        a.__set_segment_bytes(ch.config.segment_bytes);
        a.__set_ttl_ms(ch.config.ttl_ms);
        a.__set_channel_partitions(ch.config.partitions);
        a.__set_link_secret(
            link_secret(store_->state().link_key, route.channel, route.partition, route.epoch));
        if (handoff != nullptr && !route.replicas.empty() &&
            route.replicas.front().node_id == replica.node_id) {
          a.__set_producers(handoff->producers);  // the new head's, before it takes an append
        }
        jobs.push_back(PushJob{BrokerTarget{replica.node_id, node->info.admin_addr}, std::move(a)});
      }
    }
  }
  return jobs;
}

void Controller::run_pushes() {
  std::map<std::string, std::vector<PushJob>> by_node;
  std::vector<FenceJob> fences;
  {
    MutexLock lock(mu_);
    if (halted_) return;
    for (auto& job : collect_pushes_locked()) by_node[job.to.node_id].push_back(std::move(job));
    fences.swap(fences_);
  }
  // Best-effort fences go first and are never retried: the node is dead to
  // us either way, and its replicas' new epoch fences it on the data plane.
  for (const auto& f : fences) {
    if (auto r = brokers_.fence(f.to, f.channel, f.partition, f.epoch); !r) {
      spdlog::debug("fence of evicted {} on {}/{} not delivered: {}", f.to.node_id, f.channel, f.partition,
                    r.error().describe());
    }
  }
  if (by_node.empty()) return;

  struct Outcome {
    std::string node_id;
    RouteId rid;
    std::int64_t epoch = 0;
    std::optional<ControlError> error;  // nullopt: acknowledged
    bool attempted = false;
  };
  // One task per broker, so a slow broker only delays its own pushes. After
  // the first unreachable answer the rest of that broker's pushes wait for
  // the next round.
  auto push_all = [this](std::vector<PushJob> jobs) {
    std::vector<Outcome> out;
    bool unreachable = false;
    for (auto& job : jobs) {
      Outcome o{job.to.node_id,
                {job.assignment.route.channel, job.assignment.route.partition},
                job.assignment.route.epoch,
                std::nullopt,
                !unreachable};
      if (!unreachable) {
        auto r = brokers_.configure_chain(job.to, job.assignment);
        if (!r) {
          o.error = r.error();
          unreachable = r.code() == idl::ErrorCode::UNAVAILABLE;
        }
      }
      out.push_back(std::move(o));
    }
    return out;
  };
  std::vector<std::future<std::vector<Outcome>>> tasks;
  for (auto& [node, jobs] : by_node)
    tasks.push_back(std::async(std::launch::async, push_all, std::move(jobs)));

  MutexLock lock(mu_);
  const auto now = clock_.now();
  for (auto& task : tasks) {
    for (auto& o : task.get()) {
      pushing_.erase({o.node_id, o.rid});
      if (o.attempted && !o.error) {
        auto& ack = acks_[o.rid];
        if (o.epoch > ack.epoch) ack = AckState{o.epoch, {}};
        if (o.epoch == ack.epoch) ack.nodes.insert(o.node_id);
        backoff_.erase(o.node_id);
        continue;
      }
      if (!o.attempted) continue;
      auto& b = backoff_[o.node_id];
      b.delay = b.delay.count() == 0 ? Clock::duration(options_.push_retry_initial)
                                     : std::min<Clock::duration>(b.delay * 2, options_.push_retry_max);
      b.next_attempt = now + b.delay;
      const auto level =
          o.error->code == idl::ErrorCode::STALE_EPOCH ? spdlog::level::err : spdlog::level::warn;
      spdlog::log(level, "configureChain {}/{} epoch {} to {} failed: {} (retry in {} ms)", o.rid.first,
                  o.rid.second, o.epoch, o.node_id, o.error->describe(),
                  std::chrono::duration_cast<std::chrono::milliseconds>(b.delay).count());
    }
  }
  pushes_done_.notify_all();
}

}  // namespace catena::control
