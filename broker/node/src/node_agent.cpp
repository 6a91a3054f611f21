#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <thread>
#include <utility>

#include <catena/broker/broker_admin_server.hpp>
#include <catena/broker/node_agent.hpp>

namespace catena::broker {

std::vector<std::string> HeldBackLog::lines(const NodeStats& stats, std::uint64_t now_ns) {
  std::vector<std::string> out;
  std::map<std::pair<std::string, std::uint32_t>, Seen> seen;
  for (const PartitionStats& p : stats.partitions) {
    if (p.counters == nullptr) continue;
    const auto key = std::make_pair(p.channel, p.partition);
    Seen s = seen_.contains(key) ? seen_.at(key) : Seen{};
    const chain::ReplicaCounters& c = *p.counters;
    const std::uint64_t log_full = c.log_full_events.load(std::memory_order_relaxed);
    const std::uint64_t memory = c.segment_memory_refusals.load(std::memory_order_relaxed);
    const std::uint64_t rate = c.rate_limited_events.load(std::memory_order_relaxed);
    const bool grew = log_full > s.log_full || memory > s.memory || rate > s.rate;
    if (grew && (!s.told || now_ns - s.told_ns >= kEveryNs)) {
      std::vector<std::string> why;
      if (log_full > s.log_full)
        why.emplace_back(
            "the partition's log is full (every segment holds records within ttl + grace, or not yet "
            "committed)");
      if (memory > s.memory)
        why.emplace_back("the node's segment memory is spent ([storage] segment_memory_mb)");
      if (rate > s.rate)
        why.emplace_back("the tenant is at its publish rate here (max_publish_bytes_per_sec)");
      out.push_back(fmt::format(
          "{}/{} ({}, chain of {}): records held back: {}; they wait, none is dropped", p.channel,
          p.partition, p.position == 0 ? std::string("head") : fmt::format("position {}", p.position),
          p.chain_length, fmt::join(why, "; ")));
      s = Seen{log_full, memory, rate, now_ns, true};
    }
    seen.emplace(key, s);
  }
  seen_ = std::move(seen);  // partitions gone from the node are forgotten
  return out;
}

NodeAgent::NodeAgent(Broker& broker, ControllerCalls& controller, Options options)
    : broker_(broker), controller_(controller), options_(std::move(options)) {}

void NodeAgent::set_lease_deadline(std::uint64_t deadline_ns) {
  lease_deadline_ns_ = deadline_ns;
  broker_.set_lease_deadline(deadline_ns);
}

// An answered call renews the lease from when it was sent: the controller
// waits longer than the lease after it last heard from us before it acts,
// so our lease has lapsed by then, whatever the call's delay.
void NodeAgent::renew_lease(std::uint64_t sent_ns) {
  if (lease_ms_ > 0) set_lease_deadline(sent_ns + static_cast<std::uint64_t>(lease_ms_) * 1'000'000);
}

std::vector<control::idl::PartitionProgress> NodeAgent::held() const {
  const auto st = broker_.stats();
  auto out = node_stats_of(st).partitions;
  for (const auto& k : st.kept) {
    control::idl::PartitionProgress pp;
    pp.__set_channel(k.channel);
    pp.__set_partition(static_cast<std::int32_t>(k.partition));
    pp.__set_epoch(static_cast<std::int64_t>(k.epoch));
    pp.__set_end_offset(static_cast<std::int64_t>(k.replica.end_offset));
    pp.__set_commit_offset(static_cast<std::int64_t>(k.replica.commit_offset));
    out.push_back(std::move(pp));
  }
  return out;
}

bool NodeAgent::register_node(const std::vector<control::idl::PartitionProgress>& held) {
  const std::uint64_t sent = broker_.clock().now_ns();
  auto r = controller_.register_node(options_.info, held);
  if (!r) {
    spdlog::warn("register with controller {}: {}", options_.controller, r.error().describe());
    return false;
  }
  if (options_.fence != nullptr) {
    options_.fence->registered(r->__isset.admin_secret ? r->admin_secret : std::string(),
                               r->__isset.controller_epoch ? r->controller_epoch : 0);
  }
  options_.info.node_id = r->node_id;
  node_epoch_ = r->node_epoch;
  interval_ms_ = std::max(10, r->heartbeat_interval_ms);
  lease_ms_ = r->lease_ms;
  if (lease_ms_ <= 0) set_lease_deadline(~std::uint64_t{0});
  renew_lease(sent);
  broker_.set_node_id(r->node_id);
  broker_.set_node_epoch(static_cast<std::uint64_t>(r->node_epoch));
  spdlog::info("registered as {} (node epoch {}), admin {}, fabric {} ({})", r->node_id, node_epoch_,
               options_.info.admin_addr, options_.info.fabric_addr, options_.provider);
  return true;
}

void NodeAgent::step() {
  if (const auto stalled = broker_.data_plane_stalled_ms(); stalled > 0) {
    // No heartbeat for a node that cannot move data: the controller's
    // detector then probes it, the probe fails, and its chains are repaired.
    if (!stall_logged_) spdlog::error("data plane silent for {} ms: heartbeats stopped", stalled);
    stall_logged_ = true;
    return;
  }
  if (stall_logged_) spdlog::warn("data plane running again");
  stall_logged_ = false;
  control::idl::HeartbeatRequest hb;
  hb.node_id = options_.info.node_id;
  hb.node_epoch = node_epoch_;
  // Load and per-partition progress: the controller promotes a joining
  // replica once its tail reports it caught up.
  const NodeStats stats = broker_.stats();
  hb.stats = node_stats_of(stats);
  const std::uint64_t sent = broker_.clock().now_ns();
  for (const std::string& line : held_back_.lines(stats, sent)) spdlog::warn("{}", line);
  auto reply = controller_.heartbeat(hb);
  if (reply && reply->__isset.controller_epoch && options_.fence != nullptr &&
      !options_.fence->heard(reply->controller_epoch)) {
    // A deposed leader that has not noticed yet: it renews nothing and
    // fences nothing. The lease runs out unless the new leader answers.
    spdlog::warn("heartbeat answered by controller epoch {}, older than epoch {}: ignored",
                 reply->controller_epoch, options_.fence->stats().newest_epoch);
    send_link_reports();
    return;
  }
  if (reply && !reply->fenced) renew_lease(sent);
  if (reply && reply->fenced) {
    // The controller acted without us. Stop acting at once, but keep the
    // data: if we hold the last copy of a partition, the controller puts
    // it back; what it no longer wants here it fences.
    spdlog::warn(
        "controller fenced node epoch {}: suspending every replica (data kept) and registering again",
        node_epoch_);
    set_lease_deadline(0);
    broker_.suspend_all();
    // Links the retired incarnation lost say nothing about its old
    // neighbours: they dropped it. Reported now, under the new
    // registration, they would have the controller suspect and probe
    // healthy nodes (seen after a network cut healed).
    (void)broker_.take_link_reports();
    register_node(held());
  } else if (!reply && reply.code() == control::idl::ErrorCode::UNKNOWN_NODE) {
    register_node(held());
  }
  send_link_reports();
}

void NodeAgent::send_link_reports() {
  for (const auto& link : broker_.take_link_reports()) {
    control::idl::FailureReport rep;
    rep.reporter = options_.info.node_id;
    rep.suspect_node_id = link.suspect;
    rep.channel = link.channel;
    rep.partition = static_cast<std::int32_t>(link.partition);
    rep.epoch = static_cast<std::int64_t>(link.epoch);
    rep.reason = link.reason;
    if (auto r = controller_.report_failure(rep); !r) {
      spdlog::debug("report about {} on {}/{} not taken: {}", link.suspect, link.channel, link.partition,
                    r.error().describe());
    }
  }
}

void NodeAgent::run(const std::atomic<bool>& stop, const std::function<void()>& on_registered,
                    const std::function<void()>& on_pass) {
  // A restarted node with kept memory says what it kept from the first call.
  while (!stop) {
    const bool registered = register_node(held());
    if (on_pass) on_pass();
    if (registered) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (stop) return;
  if (on_registered) on_registered();
  while (!stop) {
    step();
    if (on_pass) on_pass();
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms_));
  }
}

}  // namespace catena::broker
