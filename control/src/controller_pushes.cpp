// Controller: configuration pushes. Every member of a route is sent its
// assignment (configureChain) until it acknowledged that epoch, one task per
// broker, with a per-broker backoff; best-effort fences go first. run_pushes()
// runs from tick() and from create_channel().
#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <spdlog/spdlog.h>
#include <string>
#include <utility>
#include <vector>

#include <catena/control/controller.hpp>

#include "link_secret.hpp"
#include "route_members.hpp"
#include "rpc_pool.hpp"

namespace catena::control {

using route_members::members_of;
using route_members::newest_range_epoch;
using route_members::push_targets_of;
using route_members::route_for_node;

bool Controller::fully_acked_locked(const idl::PartitionRoute& route) const {
  const auto members = members_of(route);
  if (members.empty()) return true;  // nobody to wait for (an older epoch's acks may linger)
  auto it = acks_.find({route.channel, route.partition});
  if (it == acks_.end() || it->second.epoch != route.epoch) return false;
  return std::all_of(members.begin(), members.end(),
                     [&](const idl::Replica* r) { return it->second.nodes.count(r->node_id) != 0; });
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
      const auto members = members_of(route);
      for (const auto* member : push_targets_of(route)) {
        const auto& replica = *member;
        if (ack != acks_.end() && ack->second.epoch == route.epoch &&
            ack->second.nodes.count(replica.node_id)) {
          continue;
        }
        // A node of sealed ranges only, which already confirmed a route in
        // which they were all sealed: nothing for it has changed since (a
        // push per move to every node that ever held the partition would
        // make each move cost more than the one before).
        const bool member_now = std::any_of(members.begin(), members.end(), [&](const idl::Replica* m) {
          return m->node_id == replica.node_id;
        });
        if (!member_now && ack != acks_.end()) {
          if (auto n = ack->second.newest.find(replica.node_id);
              n != ack->second.newest.end() && n->second > newest_range_epoch(route, replica.node_id)) {
            continue;
          }
        }
        const auto* node = node_locked(replica.node_id);
        if (node == nullptr || node->dead) continue;
        if (auto b = backoff_.find(replica.node_id); b != backoff_.end() && now < b->second.next_attempt)
          continue;
        // A deleted channel's partition of the same name is dropped there
        // first: owed (drops_), or found in the node's first heartbeat to
        // this controller (drop_strays_locked), which a channel created after
        // a delete waits for.
        if (drop_pending_locked(replica.node_id, route.channel, route.partition)) continue;
        if (ch.first_epoch > 1 && stats_.count(replica.node_id) == 0) continue;
        if (!pushing_.insert({replica.node_id, rid}).second) continue;  // another thread is on it
        idl::ChainAssignment a;
        a.__set_route(route_for_node(route, replica.node_id));
        a.__set_segment_bytes(ch.config.segment_bytes);
        a.__set_ttl_ms(ch.config.ttl_ms);
        a.__set_channel_partitions(ch.config.partitions);
        a.__set_link_secret(
            link_secret(store_->state().link_key, route.channel, route.partition, route.epoch));
        a.__set_lineage(link_secret(store_->state().link_key, route.channel, route.partition, 0));
        a.__set_access_secret(access_secret_locked(route.channel, route.partition));
        if (auto limits = tenant_limits_locked(route.channel)) a.__set_tenant(*limits);
        if (handoff != nullptr && !route.replicas.empty() &&
            route.replicas.front().node_id == replica.node_id) {
          a.__set_producers(handoff->producers);  // the new head's, before it takes an append
        }
        jobs.push_back(PushJob{broker_target_locked(replica.node_id, node->info.admin_addr), std::move(a)});
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
  // Best-effort fences, never retried: the node is dead to us either way,
  // and its replicas' new epoch fences it on the data plane. They run beside
  // the pushes, not before them: a stopped node's fence waits out the whole
  // RPC timeout, which held a silent head's new chain back by a second.
  std::vector<std::future<void>> fenced;
  for (auto& f : fences) {
    fenced.push_back(rpc_pool_->submit([this, f = std::move(f)] {
      if (auto r = brokers_.fence(f.to, f.channel, f.partition, f.epoch); !r) {
        spdlog::debug("fence of evicted {} on {}/{} not delivered: {}", f.to.node_id, f.channel, f.partition,
                      r.error().describe());
      }
    }));
  }
  // Waited for at the end of the round, as they were.
  struct WaitAll {
    std::vector<std::future<void>>& futures;
    ~WaitAll() {
      for (auto& f : futures) f.wait();
    }
  } wait_fences{fenced};
  if (by_node.empty()) return;

  struct Outcome {
    std::string node_id;
    RouteId rid;
    std::int64_t epoch = 0;
    std::optional<ControlError> error;  // nullopt: acknowledged
    bool attempted = false;
    std::string access_secret;  // what the push carried
    std::optional<idl::TenantNodeLimits> tenant;
    std::int64_t ttl_ms = 0;
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
                !unreachable,
                job.assignment.access_secret,
                job.assignment.__isset.tenant ? std::optional(job.assignment.tenant) : std::nullopt,
                job.assignment.ttl_ms};
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
    tasks.push_back(rpc_pool_->submit(
        [push_all, jobs = std::move(jobs)]() mutable { return push_all(std::move(jobs)); }));

  // Every answer before the lock: a broker that takes its time (up to the
  // RPC timeout) holds up no heartbeat, request or probe verdict.
  std::vector<Outcome> outcomes;
  for (auto& task : tasks) {
    for (auto& o : task.get()) outcomes.push_back(std::move(o));
  }
  MutexLock lock(mu_);
  const auto now = clock_.now();
  for (auto& o : outcomes) {
    pushing_.erase({o.node_id, o.rid});
    if (o.attempted && !o.error) {
      // A push built before the tenant's token was rotated (or its quotas
      // altered) carried the old access secret (or limits): it is not the
      // confirmation those wait for (the next round pushes the new ones).
      // So did one built before the channel's retention was altered.
      const auto ch = store_->state().channels.find(o.rid.first);
      if (o.access_secret != access_secret_locked(o.rid.first, o.rid.second) ||
          o.tenant != tenant_limits_locked(o.rid.first) ||
          (ch != store_->state().channels.end() && ch->second.config.ttl_ms != o.ttl_ms)) {
        continue;
      }
      auto& ack = acks_[o.rid];
      if (o.epoch > ack.epoch) {
        ack.epoch = o.epoch;
        ack.nodes.clear();
      }
      if (o.epoch == ack.epoch) ack.nodes.insert(o.node_id);
      auto& newest = ack.newest[o.node_id];
      newest = std::max(newest, o.epoch);
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
  pushes_done_.notify_all();
}

}  // namespace catena::control
