// Controller::delete_channel (deleteChannel in catena.thrift): one metadata
// record takes the channel and everything kept under its name; then every
// node that held a role in it drops its partitions, told by the path a
// chain member that leaves a chain takes: a configureChain whose route names
// it nowhere (the broker drops the replica and the sealed ranges the route
// no longer lists). A node that cannot be reached keeps its drop in drops_,
// retried by tick() (retry_drops) until it answers or is declared dead; a
// node that reports in a heartbeat a partition of no channel, or one older
// than the channel of that name (it missed its drop, across a controller
// restart too), is sent one (drop_strays_locked).
// A channel created again under the name starts above every epoch this one
// used, and its pushes to a node wait for a drop still owed there.
#include <algorithm>
#include <set>
#include <spdlog/spdlog.h>

#include <catena/control/controller.hpp>

#include "link_secret.hpp"
#include "route_members.hpp"

namespace catena::control {

Result<void> Controller::delete_channel(const std::string& name) {
  std::vector<PushJob> drops;
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    auto found = channel_locked(name);
    if (!found) return found.error();
    const meta::ChannelRecord ch = **found;
    const auto& state = store_->state();
    if (state.moves.count(name) != 0) {
      return make_error(
          idl::ErrorCode::UNAVAILABLE,
          fmt::format("a partition of '{}' is being moved: delete it once the move is done", name));
    }
    for (const auto& g : ch.generations) {
      if (!g.complete) {
        return make_error(
            idl::ErrorCode::UNAVAILABLE,
            fmt::format("'{}' is being altered (generation {}): delete it once the alter is done", name,
                        g.generation));
      }
    }
    for (const auto& [id, intent] : state.intents) {
      for (const auto& key : intent.routes) {
        if (key.channel == name) {
          return make_error(
              idl::ErrorCode::UNAVAILABLE,
              fmt::format("partition {} of '{}' is being repaired (node {} lost): delete it once it is done",
                          key.partition, name, intent.node_id));
        }
      }
    }
    for (const auto& [group, g] : groups_.groups()) {
      if (g.channel == name && !g.members.empty()) {
        return invalid_argument(fmt::format("group '{}' has {} member(s) reading '{}': stop them first",
                                            group, g.members.size(), name));
      }
    }
    // Who to tell: every node the routes name, alive or not yet known dead.
    std::vector<meta::PendingDrop> owed;
    for (const auto& route : ch.routes) {
      idl::PartitionRoute none;
      none.__set_channel(name);
      none.__set_partition(route.partition);
      none.__set_epoch(route.epoch + 1);
      none.__set_start_offset(route.start_offset);
      none.__isset.replicas = true;
      none.__isset.joining = true;
      none.__isset.sealed = true;
      std::set<std::string> told;
      for (const auto* replica : route_members::push_targets_of(route)) {
        if (!told.insert(replica->node_id).second) continue;
        const auto* node = node_locked(replica->node_id);
        if (node == nullptr || node->dead) continue;
        meta::PendingDrop d;
        d.__set_node_id(replica->node_id);
        d.__set_route(none);
        d.__set_segment_bytes(ch.config.segment_bytes);
        d.__set_ttl_ms(ch.config.ttl_ms);
        d.__set_channel_partitions(ch.config.partitions);
        drops.push_back(drop_job_locked(d));
        owed.push_back(std::move(d));
      }
    }
    meta::MetaRecord record;
    record.__set_delete_channel(name);
    if (!owed.empty()) record.__set_add_drops(owed);  // durable until confirmed
    if (auto r = store_->commit(record); !r) return r.error();
    // What the controller remembered of its partitions.
    const auto of_channel = [&](const RouteId& rid) { return rid.first == name; };
    std::erase_if(acks_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(rejoiners_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(lost_members_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(raised_high_water_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(unconfirmed_high_water_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(queued_offsets_, [&](const auto& e) { return std::get<1>(e.first) == name; });
    std::erase_if(link_faults_, [&](const auto& e) { return of_channel(e.first.first); });
    std::erase_if(warned_short_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(warned_waiting_, [&](const auto& e) { return of_channel(e.first); });
    std::erase_if(fences_, [&](const FenceJob& f) { return f.channel == name; });
    std::erase_if(drops_, [&](const PushJob& d) { return d.assignment.route.channel == name; });
    spdlog::info("channel '{}' deleted: {} partition(s); dropping them on {} node role(s)", name,
                 ch.routes.size(), drops.size());
  }
  // A push of its routes still in flight would install a partition again
  // after the drop: wait for its answer first (none starts now: the
  // channel is gone from the state the pushes are collected from).
  await_channel_pushes(name);
  std::vector<PushJob> undelivered;
  std::vector<PushJob> delivered;
  for (auto& d : drops) {
    if (auto r = brokers_.configure_chain(d.to, d.assignment); !r) {
      spdlog::warn("drop of {}/{} on {} not delivered (retried): {}", name, d.assignment.route.partition,
                   d.to.node_id, r.error().describe());
      undelivered.push_back(std::move(d));
    } else {
      delivered.push_back(std::move(d));
    }
  }
  if (drops.empty()) return {};
  MutexLock lock(mu_);
  if (!forget_drops_locked(delivered)) {
    for (auto& d : delivered) undelivered.push_back(std::move(d));
  }
  for (auto& d : undelivered) drops_.push_back(std::move(d));
  return {};
}

Controller::PushJob Controller::drop_job_locked(const meta::PendingDrop& drop) {
  const auto& state = store_->state();
  idl::ChainAssignment a;
  a.__set_route(drop.route);
  a.__set_segment_bytes(drop.segment_bytes);
  a.__set_ttl_ms(drop.ttl_ms);
  a.__set_channel_partitions(drop.channel_partitions);
  a.__set_link_secret(
      link_secret(state.link_key, drop.route.channel, drop.route.partition, drop.route.epoch));
  a.__set_lineage(link_secret(state.link_key, drop.route.channel, drop.route.partition, 0));
  const auto* node = node_locked(drop.node_id);
  return PushJob{broker_target_locked(drop.node_id, node != nullptr ? node->info.admin_addr : std::string{}),
                 std::move(a)};
}

bool Controller::forget_drops_locked(const std::vector<PushJob>& done) {
  std::vector<meta::PendingDrop> ended;
  for (const auto& job : done) {
    const auto& route = job.assignment.route;
    for (const auto& d : store_->state().pending_drops) {
      if (d.node_id == job.to.node_id && d.route.channel == route.channel &&
          d.route.partition == route.partition && d.route.epoch == route.epoch) {
        ended.push_back(d);
      }
    }
  }
  if (ended.empty()) return true;
  meta::MetaRecord record;
  record.__set_end_drops(ended);
  if (auto r = store_->commit(record); !r) {
    spdlog::warn("could not record {} delivered drop(s) (sent again later): {}", ended.size(),
                 r.error().describe());
    return false;
  }
  return true;
}

bool Controller::drop_pending_locked(const std::string& node_id, const std::string& channel,
                                     std::int32_t partition) const {
  return std::any_of(drops_.begin(), drops_.end(), [&](const PushJob& d) {
    return d.to.node_id == node_id && d.assignment.route.channel == channel &&
           d.assignment.route.partition == partition;
  });
}

void Controller::drop_strays_locked(const std::string& node_id, const idl::NodeStats& stats) {
  const auto* node = node_locked(node_id);
  if (node == nullptr) return;
  for (const auto& p : stats.partitions) {
    if (p.partition < 0) continue;
    // Of a channel that exists, a copy older than the channel itself is a
    // deleted one's of the same name.
    const auto ch = store_->state().channels.find(p.channel);
    if (ch != store_->state().channels.end() && p.epoch >= ch->second.first_epoch) continue;
    if (drop_pending_locked(node_id, p.channel, p.partition)) continue;
    idl::PartitionRoute none;
    none.__set_channel(p.channel);
    none.__set_partition(p.partition);
    none.__set_epoch(std::max<std::int64_t>(p.epoch, 0) + 1);
    none.__isset.replicas = true;
    none.__isset.joining = true;
    none.__isset.sealed = true;
    idl::ChainAssignment a;
    a.__set_route(none);
    // Sizes the broker's check takes; no replica is made of them.
    a.__set_segment_bytes(std::int64_t{4096});
    a.__set_ttl_ms(std::int64_t{1000});
    a.__set_channel_partitions(p.partition + 1);
    spdlog::info("{} reports {}/{} of no channel (deleted): dropping it there", node_id, p.channel,
                 p.partition);
    drops_.push_back(PushJob{broker_target_locked(node_id, node->info.admin_addr), std::move(a)});
  }
}

void Controller::retry_drops() {
  std::vector<PushJob> drops;
  {
    MutexLock lock(mu_);
    if (halted_ || drops_.empty()) return;
    // A node declared dead since is told nothing more: a new incarnation
    // starts empty, and the epoch floor keeps any kept copy out of a channel
    // created again under the name.
    std::vector<PushJob> given_up;
    std::erase_if(drops_, [&](const PushJob& d) {
      mu_.assert_held();  // the lambda runs under the lock taken above
      const auto* node = node_locked(d.to.node_id);
      const bool gone = node == nullptr || node->dead;
      if (gone) given_up.push_back(d);
      return gone;
    });
    (void)forget_drops_locked(given_up);  // if not written: dropped on the next open (dead then)
    // The nodes the pushes back off from (they did not answer lately) wait.
    const auto now = clock_.now();
    std::vector<PushJob> later;
    for (auto& d : drops_) {
      const auto b = backoff_.find(d.to.node_id);
      (b != backoff_.end() && now < b->second.next_attempt ? later : drops).push_back(std::move(d));
    }
    drops_.swap(later);
  }
  std::vector<PushJob> undelivered;
  std::vector<PushJob> delivered;
  for (auto& d : drops) {
    if (auto r = brokers_.configure_chain(d.to, d.assignment); !r) {
      undelivered.push_back(std::move(d));
    } else {
      spdlog::info("partition {}/{} of a deleted channel dropped on {}", d.assignment.route.channel,
                   d.assignment.route.partition, d.to.node_id);
      delivered.push_back(std::move(d));
    }
  }
  MutexLock lock(mu_);
  if (!forget_drops_locked(delivered)) {
    for (auto& d : delivered) drops_.push_back(std::move(d));  // owed until recorded
  }
  if (undelivered.empty()) return;
  const auto now = clock_.now();
  for (auto& d : undelivered) {
    auto& b = backoff_[d.to.node_id];
    b.delay = b.delay.count() == 0 ? Clock::duration(options_.push_retry_initial)
                                   : std::min<Clock::duration>(b.delay * 2, options_.push_retry_max);
    b.next_attempt = now + b.delay;
    drops_.push_back(std::move(d));
  }
}

}  // namespace catena::control
