// Tail-offset partition handoff (Controller::move_partition): the old head
// is sealed, everything it stored is committed at offset H, and one metadata
// record makes a new chain serve [H, ...) with the old head's producer state
// while the old chain keeps [start, H) read-only. No record is copied.
//
// Steps, and what a failure at each leaves:
//   1. MoveIntent written         restart: the move is given up (old chain
//                                 at a new epoch, which lifts any seal)
//   2. old head sealed, polled    head unreachable, chain changed, or not
//      until commit == end        committed in time: given up the same way
//   3. route at epoch+1 and       one record: new chain, the sealed range,
//      intent closed              the handoff's producer state (only what
//                                 changed: meta::RouteMove)
//   4. pushed                     the push machinery retries; a restart
//                                 pushes every route again (with the
//                                 producer state to the head)
#include <algorithm>
#include <chrono>
#include <set>
#include <spdlog/fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <thread>

#include <catena/chain/limits.hpp>
#include <catena/control/controller.hpp>
#include <catena/control/tenants.hpp>

namespace catena::control {
namespace {

meta::RouteKey route_key(const std::string& channel, std::int32_t partition) {
  meta::RouteKey key;
  key.__set_channel(channel);
  key.__set_partition(partition);
  return key;
}

std::vector<std::string> ids_of(const std::vector<idl::Replica>& replicas) {
  std::vector<std::string> out;
  for (const auto& r : replicas) out.push_back(r.node_id);
  return out;
}

}  // namespace

Result<void> Controller::abandon_move_locked(const std::string& channel, std::int32_t partition,
                                             std::int64_t from_epoch, const std::string& why) {
  meta::MetaRecord record;
  record.__set_end_move(route_key(channel, partition));
  auto route = route_locked(channel, partition);
  if (route && (*route)->epoch == from_epoch) {
    // A new epoch for the same chain: its head takes appends again.
    idl::PartitionRoute next = **route;
    next.__set_epoch(from_epoch + 1);
    record.__set_put_routes({next});
  }
  if (auto r = store_->commit(record); !r) return r.error();
  spdlog::warn("{}/{}: move given up ({}); the chain goes on where it was", channel, partition, why);
  return {};
}

Result<idl::PartitionRoute> Controller::move_partition(const std::string& channel, std::int32_t partition,
                                                       const std::vector<std::string>& to) {
  MutexLock move_lock(move_mu_);
  idl::PartitionRoute old;
  std::vector<idl::Replica> targets;
  BrokerTarget head;
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    auto route = route_locked(channel, partition);
    if (!route) return route.error();
    old = **route;
    if (to.empty() || to.size() > static_cast<std::size_t>(chain::limits::kMaxReplication)) {
      return make_error(
          idl::ErrorCode::INVALID_ARGUMENT,
          fmt::format("a chain has 1 to {} nodes, not {}", chain::limits::kMaxReplication, to.size()));
    }
    std::set<std::string> seen;
    for (const auto& id : to) {
      if (!seen.insert(id).second) {
        return make_error(idl::ErrorCode::INVALID_ARGUMENT, fmt::format("{} is named twice", id));
      }
      const auto* node = node_locked(id);
      const auto state = detector_.state(id);
      if (node == nullptr || node->dead || !state || *state != idl::NodeState::ALIVE) {
        return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                          fmt::format("{} is not an ALIVE node (see `catena status`)", id));
      }
      if (node->drain != idl::DrainState::SERVING) {
        return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                          fmt::format("{} is {} and takes no partitions", id,
                                      node->drain == idl::DrainState::DRAINING ? "draining" : "drained"));
      }
      if (!placement_allowed_locked(channel, id)) {
        return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                          fmt::format("{} is in zone '{}', outside the zones tenant '{}' allows its data in",
                                      id, node->info.zone, namespace_of(channel)));
      }
      idl::Replica r;
      r.__set_node_id(id);
      r.__set_fabric_addr(node->info.fabric_addr);
      r.__set_admin_addr(node->info.admin_addr);
      r.__set_node_epoch(node->node_epoch);
      targets.push_back(std::move(r));
    }
    if (old.replicas.empty() || !old.joining.empty() || !fully_acked_locked(old)) {
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("{}/{} is being repaired or reconfigured; try again when `catena channel "
                                    "describe` shows a full chain",
                                    channel, partition));
    }
    if (auto m = store_->state().moves.find(channel);
        m != store_->state().moves.end() && m->second.count(partition) != 0) {
      return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("{}/{} is being moved", channel, partition));
    }
    if (ids_of(old.replicas) == to) return old;  // already there
    const auto* head_node = node_locked(old.replicas.front().node_id);
    if (head_node == nullptr || head_node->dead) {
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("the head of {}/{} is down", channel, partition));
    }
    head = broker_target_locked(head_node->info.node_id, head_node->info.admin_addr);
    meta::MoveIntent intent;
    intent.__set_channel(channel);
    intent.__set_partition(partition);
    intent.__set_from_epoch(old.epoch);
    intent.__set_to(to);
    meta::MetaRecord record;
    record.__set_begin_move(intent);
    if (auto r = store_->commit(record); !r) return r.error();
    if (crash_locked("move.intent_written")) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
  }
  const auto give_up = [&](const std::string& why) -> ControlError {
    MutexLock lock(mu_);
    if (halted_) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
    if (auto r = abandon_move_locked(channel, partition, old.epoch, why); !r) return r.error();
    return make_error(
        idl::ErrorCode::UNAVAILABLE,
        fmt::format("{}/{} not moved: {}; nothing changed, try again", channel, partition, why));
  };

  // Seal the head and wait until the chain has committed all it stored. The
  // wait is bounded RPC polling, on the steady clock whatever clock_ is.
  const auto deadline = std::chrono::steady_clock::now() + options_.move_commit_timeout;
  idl::SealReply sealed;
  for (;;) {
    auto r = brokers_.seal(head, channel, partition, old.epoch);
    if (!r)
      return give_up(fmt::format("the head {} could not be sealed: {}", head.node_id, r.error().describe()));
    sealed = std::move(r.value());
    if (sealed.commit_offset >= sealed.end_offset) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return give_up(fmt::format("the chain committed {} of {} in {} ms", sealed.commit_offset,
                                 sealed.end_offset, options_.move_commit_timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const std::int64_t at = sealed.end_offset;

  idl::PartitionRoute next;
  {
    MutexLock lock(mu_);
    if (crash_locked("move.sealed")) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
    auto route = route_locked(channel, partition);
    if (!route) return route.error();
    if ((*route)->epoch != old.epoch) {
      // A repair moved the chain on meanwhile (its new epoch lifted the
      // seal): only the intent is left to close.
      if (auto r = abandon_move_locked(channel, partition, old.epoch, "its chain changed"); !r)
        return r.error();
      return make_error(
          idl::ErrorCode::UNAVAILABLE,
          fmt::format("{}/{} not moved: its chain changed during the move; try again", channel, partition));
    }
    // Only what changes (meta::RouteMove), so the record does not carry
    // the ranges earlier moves sealed.
    meta::RouteMove change;
    change.__set_channel(channel);
    change.__set_partition(partition);
    change.__set_epoch(old.epoch + 1);
    change.__set_replicas(targets);
    change.__set_start_offset(at);
    if (at > old.start_offset) {  // an empty range serves nothing
      idl::SealedRange range;
      range.__set_start_offset(old.start_offset);
      range.__set_end_offset(at);
      range.__set_epoch(old.epoch);
      range.__set_replicas(old.replicas);
      range.__set_sealed_at_ms(wall_ms());
      change.sealed = std::move(range);
      change.__isset.sealed = true;
    }
    meta::MetaRecord record;
    const meta::RouteKey key = route_key(channel, partition);
    meta::Handoff handoff;
    handoff.__set_epoch(change.epoch);
    handoff.__set_producers(sealed.producers);
    record.move_route = std::move(change);  // the generated setter would copy
    record.__isset.move_route = true;
    record.__set_end_move(key);
    record.__set_handoff_key(key);
    record.set_handoff = std::move(handoff);
    record.__isset.set_handoff = true;
    if (auto r = store_->commit(record); !r) return r.error();
    next = **route_locked(channel, partition);  // as apply_record left it
    spdlog::info(
        "{}/{}: moved at offset {}: [{}] (epoch {}) serves from {} on; [{}] keeps [{}, {}) read-only",
        channel, partition, at, fmt::join(ids_of(next.replicas), " -> "), next.epoch, at,
        fmt::join(ids_of(old.replicas), " -> "), old.start_offset, at);
    if (crash_locked("move.committed")) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
  }
  // The new chain is installed before the call returns (the push machinery
  // retries whatever does not arrive now).
  run_pushes();
  return next;
}

}  // namespace catena::control
