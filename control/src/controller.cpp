// Controller: opening, membership and the request paths. Detection, repair
// and pushes live in controller_maintenance.cpp.
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <thread>

#include <catena/control/controller.hpp>
#include <catena/control/placement.hpp>
#include <catena/control/tenants.hpp>
#include <catena/control/validation.hpp>

#include "link_secret.hpp"
#include "rpc_pool.hpp"

namespace catena::control {
namespace {

idl::Replica replica_of(const meta::NodeRecord& node) {
  idl::Replica r;
  r.__set_node_id(node.info.node_id);
  r.__set_fabric_addr(node.info.fabric_addr);
  r.__set_admin_addr(node.info.admin_addr);
  r.__set_node_epoch(node.node_epoch);
  return r;
}

idl::ChannelInfo channel_info(const meta::ChannelRecord& ch) {
  idl::ChannelInfo info;
  info.__set_config(ch.config);
  info.__set_routes(ch.routes);
  info.__set_generations(ch.generations);
  return info;
}

}  // namespace

Result<std::unique_ptr<Controller>> Controller::open(Options options, const Clock& clock,
                                                     BrokerAdminClient& brokers) {
  if (options.heartbeat_interval.count() <= 0 || options.heartbeat_timeout <= options.heartbeat_interval) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("heartbeat_timeout ({} ms) must exceed heartbeat_interval ({} ms) > 0",
                                  options.heartbeat_timeout.count(), options.heartbeat_interval.count()));
  }
  if (options.lease.count() == 0) options.lease = options.heartbeat_timeout / 2;
  if (options.lease <= options.heartbeat_interval || options.lease >= options.heartbeat_timeout) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("lease ({} ms) must lie between heartbeat_interval ({} ms) and "
                                  "heartbeat_timeout ({} ms)",
                                  options.lease.count(), options.heartbeat_interval.count(),
                                  options.heartbeat_timeout.count()));
  }
  if (options.isolation_percent < 1 || options.isolation_percent > 100) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("isolation_percent must be in 1..100, got {}", options.isolation_percent));
  }
  if (options.group_heartbeat_interval.count() <= 0 ||
      options.group_session_timeout <= options.group_heartbeat_interval) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("group_session_timeout ({} ms) must exceed group_heartbeat_interval ({} ms) > 0",
                    options.group_session_timeout.count(), options.group_heartbeat_interval.count()));
  }
  if (options.replacement_delay.count() < 0) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("replacement_delay must be >= 0 ms, got {} ms", options.replacement_delay.count()));
  }
  if (options.broker_rpc_threads < 1 || options.broker_rpc_threads > 1024) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("broker_rpc_threads must be in 1..1024, got {}", options.broker_rpc_threads));
  }
  if (options.probe_attempts < 1 || options.push_retry_initial.count() <= 0 ||
      options.push_retry_max < options.push_retry_initial || options.snapshot_every_records == 0) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        "probe_attempts >= 1, 0 < push_retry_initial <= push_retry_max, snapshot_every_records > 0");
  }
  auto store = open_metadata_store(options.metadata, {options.data_dir, options.snapshot_every_records},
                                   options.zk_session_timeout, options.zk_connect_timeout);
  if (!store) return store.error();

  std::unique_ptr<Controller> c(new Controller(std::move(options), clock, brokers, std::move(*store)));
  MutexLock lock(c->mu_);
  if (c->store_->state().link_key.empty()) {
    auto key = new_link_key();
    if (!key) return make_error(idl::ErrorCode::INTERNAL, "no random bytes for the replica-link key");
    meta::MetaRecord record;
    record.__set_set_link_key(*key);
    if (auto r = c->store_->commit(record); !r) return r.error();
  }
  auto epoch = c->store_->take_controller_epoch();
  if (!epoch) return epoch.error();
  c->controller_epoch_ = *epoch;
  c->recoveries_.__set_since_ms(c->wall_ms());
  const auto& state = c->store_->state();
  spdlog::info("metadata {}: {} node(s), {} channel(s), {} open repair(s); controller epoch {}",
               c->store_->describe(), state.nodes.size(), state.channels.size(), state.intents.size(),
               c->controller_epoch_.load());
  // Every live node gets a fresh timeout window: silence while we were down
  // is not evidence against it.
  for (const auto& [id, node] : state.nodes) {
    if (!node.dead) c->detector_.track(id, node.node_epoch);
  }
  // Finish removals a crash interrupted before anything else can run. The
  // rest of each repair (restore R, pushes) is reconciled by tick(); no route
  // counts as acknowledged yet, so every replica is pushed its route again.
  const auto intents = state.intents;
  for (const auto& [id, intent] : intents) {
    spdlog::info("resuming repair {} of {} ({})", id, intent.node_id, intent.reason);
    if (auto r = c->remove_from_routes_locked(intent, /*fence_evicted=*/false); !r) return r.error();
  }
  // Drops of deleted channels a previous controller could not deliver.
  std::vector<PushJob> to_the_dead;
  for (const auto& drop : state.pending_drops) {
    const auto* node = c->node_locked(drop.node_id);
    // A node declared dead is told nothing more (retry_drops()).
    (node == nullptr || node->dead ? to_the_dead : c->drops_).push_back(c->drop_job_locked(drop));
  }
  (void)c->forget_drops_locked(to_the_dead);
  if (!state.pending_drops.empty()) {
    spdlog::info("{} drop(s) of deleted channels' partitions still owed to nodes",
                 state.pending_drops.size());
  }
  // A move the previous run did not finish is given up: its old head may be
  // sealed, and the new epoch lets it take appends again.
  const auto moves = state.moves;
  for (const auto& [channel, parts] : moves) {
    for (const auto& [partition, move] : parts) {
      if (auto r = c->abandon_move_locked(channel, partition, move.from_epoch, "the controller restarted");
          !r) {
        return r.error();
      }
    }
  }
  return c;
}

namespace {

// The store as the Controller sees it, counting what commits
// (ControllerCounters): every write of the metadata passes here, so no
// call site can forget to count.
class CountingStore final : public MetadataStore {
 public:
  CountingStore(std::unique_ptr<MetadataStore> inner, std::shared_ptr<ControllerCounters> counters)
      : inner_(std::move(inner)), counters_(std::move(counters)) {}
  [[nodiscard]] const meta::MetaState& state() const noexcept override { return inner_->state(); }
  [[nodiscard]] Result<void> commit(const meta::MetaRecord& record) override {
    std::int64_t bumps = 0;
    if (record.__isset.put_routes) {
      const auto& channels = inner_->state().channels;
      for (const auto& route : record.put_routes) {
        const auto ch = channels.find(route.channel);
        if (ch == channels.end()) continue;  // a new channel's first routes
        const auto old =
            std::find_if(ch->second.routes.begin(), ch->second.routes.end(),
                         [&](const idl::PartitionRoute& r) { return r.partition == route.partition; });
        if (old != ch->second.routes.end() && route.epoch > old->epoch) ++bumps;
      }
    }
    auto r = inner_->commit(record);
    if (!r) return r;
    counters_->route_epoch_bumps.fetch_add(bumps, std::memory_order_relaxed);
    if (record.__isset.begin_repair) counters_->evictions.fetch_add(1, std::memory_order_relaxed);
    if (record.__isset.end_repair) counters_->repairs_completed.fetch_add(1, std::memory_order_relaxed);
    return r;
  }
  // Only the high-water marks go this way: nothing to count.
  [[nodiscard]] Result<void> commit_in_background(const meta::MetaRecord& record) override {
    return inner_->commit_in_background(record);
  }
  [[nodiscard]] BackgroundCommit background_commit() override { return inner_->background_commit(); }
  [[nodiscard]] std::string describe() const override { return inner_->describe(); }
  [[nodiscard]] bool connected() const override { return inner_->connected(); }
  [[nodiscard]] bool failed() const noexcept override { return inner_->failed(); }
  [[nodiscard]] Result<std::int64_t> take_controller_epoch() override {
    return inner_->take_controller_epoch();
  }

 private:
  std::unique_ptr<MetadataStore> inner_;
  std::shared_ptr<ControllerCounters> counters_;
};

std::set<std::string> known_groups(const meta::MetaState& state) {
  std::set<std::string> out;
  for (const auto& [group, offsets] : state.group_offsets) out.insert(group);
  return out;
}

}  // namespace

// store_ is set once, by the constructor, and failed() is safe on any thread.
bool Controller::metadata_failed() const noexcept NO_THREAD_SAFETY_ANALYSIS {
  return store_->failed();
}

Controller::Controller(Options options, const Clock& clock, BrokerAdminClient& brokers,
                       std::unique_ptr<MetadataStore> store)
    : options_(std::move(options)),
      clock_(clock),
      brokers_(brokers),
      store_(std::make_unique<CountingStore>(std::move(store), counters_)),
      detector_(FailureDetector::Options{options_.heartbeat_timeout, options_.probe_attempts,
                                         options_.heartbeat_loss},
                clock),
      // Numbers of a block reserved before a restart may have been handed out.
      next_producer_number_(std::max<std::int64_t>(1, store_->state().producer_numbers_reserved)),
      groups_(GroupCoordinator::Options{options_.group_session_timeout, options_.group_heartbeat_interval},
              clock, known_groups(store_->state())),
      rpc_pool_(std::make_unique<RpcPool>(static_cast<std::size_t>(options_.broker_rpc_threads))) {}

Controller::~Controller() = default;

Result<void> Controller::check_running_locked() const {
  if (halted_) return make_error(idl::ErrorCode::INTERNAL, "controller halted (injected crash)");
  return {};
}

bool Controller::crash_locked(std::string_view point) {
  if (options_.crash_point && options_.crash_point(point)) {
    spdlog::warn("injected crash at {}", point);
    halted_ = true;
  }
  return halted_;
}

std::chrono::milliseconds Controller::lease() const {
  return options_.lease;
}

bool Controller::halted() const {
  MutexLock lock(mu_);
  return halted_;
}

meta::MetaState Controller::metadata() const {
  MutexLock lock(mu_);
  return store_->state();
}

const meta::NodeRecord* Controller::node_locked(const std::string& node_id) const {
  const auto& nodes = store_->state().nodes;
  auto it = nodes.find(node_id);
  return it == nodes.end() ? nullptr : &it->second;
}

Result<const meta::ChannelRecord*> Controller::channel_locked(const std::string& name) const {
  const auto& channels = store_->state().channels;
  auto it = channels.find(name);
  if (it == channels.end()) {
    return make_error(idl::ErrorCode::UNKNOWN_CHANNEL, fmt::format("no channel named '{}'", name));
  }
  return &it->second;
}

Result<const idl::PartitionRoute*> Controller::route_locked(const std::string& channel,
                                                            std::int32_t partition) const {
  auto ch = channel_locked(channel);
  if (!ch) return ch.error();
  const auto& routes = (*ch)->routes;
  if (partition < 0 || static_cast<std::size_t>(partition) >= routes.size()) {
    return make_error(
        idl::ErrorCode::INVALID_ARGUMENT,
        fmt::format("channel '{}' has partitions 0..{}, not {}", channel, routes.size() - 1, partition));
  }
  return &routes[static_cast<std::size_t>(partition)];
}

std::map<std::string, std::int64_t> Controller::replica_counts_locked() const {
  std::map<std::string, std::int64_t> counts;
  for (const auto& [name, ch] : store_->state().channels) {
    for (const auto& route : ch.routes) {
      for (const auto& r : route.replicas) ++counts[r.node_id];
      for (const auto& r : route.joining) ++counts[r.node_id];  // copying costs like holding
    }
  }
  return counts;
}

bool Controller::in_any_route_locked(const std::string& node_id) const {
  return replica_counts_locked().count(node_id) != 0;
}

std::string Controller::assign_node_id_locked(std::int64_t* next_seq) const {
  std::int64_t seq = store_->state().next_node_seq;
  std::string id;
  do {
    id = fmt::format("node-{}", seq++);
  } while (node_locked(id) != nullptr);  // an operator may have picked "node-N" by hand
  *next_seq = seq;
  return id;
}

Result<idl::RegisterReply> Controller::register_node(const idl::NodeInfo& request,
                                                     const std::vector<idl::PartitionProgress>& held) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  if (auto r = validate_node_info(request); !r) return r.error();

  meta::MetaRecord record;
  idl::NodeInfo info = request;
  if (info.node_id.empty()) {
    std::int64_t next_seq = 0;
    info.__set_node_id(assign_node_id_locked(&next_seq));
    record.__set_next_node_seq(next_seq);
  }
  const std::string id = info.node_id;

  // Another live node registered at this admin address is gone: two brokers
  // cannot listen on one port, and probes to it would reach the newcomer.
  std::vector<std::string> displaced;
  for (const auto& [other_id, other] : store_->state().nodes) {
    if (other_id != id && !other.dead && other.info.admin_addr == info.admin_addr)
      displaced.push_back(other_id);
  }
  for (const auto& other_id : displaced) {
    const auto reason = fmt::format("{} registered at its admin address {}", id, info.admin_addr);
    if (auto r = evict_locked(other_id, reason, /*fence_evicted=*/false); !r) return r.error();
  }
  // The earlier incarnation leaves every chain that has other members
  // before the new one exists (what it held there is held by them). Where it
  // is the last member it stays: return_last_members_locked() decides.
  if (const auto* old = node_locked(id); old != nullptr) {
    Result<void> r;
    if (old->dead) {
      r = finish_removals_locked(id);
    } else if (in_any_route_locked(id)) {
      r = evict_locked(id, "registered again: a new incarnation", /*fence_evicted=*/false);
    }
    if (!r) return r.error();
  }

  meta::NodeRecord node;
  node.__set_info(info);
  node.__set_node_epoch(store_->state().next_node_epoch);
  node.__set_dead(false);
  // A drain goes on through a restart (the new incarnation holds nothing of
  // the old one's chains); a drained node that starts again serves again.
  if (const auto* old = node_locked(id); old != nullptr && old->drain == idl::DrainState::DRAINING) {
    node.__set_drain(idl::DrainState::DRAINING);
  }
  record.__set_put_node(node);
  record.__set_next_node_epoch(node.node_epoch + 1);
  // What the earlier incarnation was a rejoin candidate for is this one's
  // to claim again (return_last_members_locked keeps what it still may).
  forget_rejoiner_locked(id);
  std::vector<idl::PartitionRoute> changed;
  return_last_members_locked(node, held, &changed);
  if (!changed.empty()) record.__set_put_routes(changed);
  if (auto r = store_->commit(record); !r) return r.error();

  detector_.track(id, node.node_epoch);
  stats_.erase(id);
  backoff_.erase(id);
  spdlog::info("node {} registered: epoch {}, admin {}, fabric {}, zone '{}', datacenter '{}'", id,
               node.node_epoch, info.admin_addr, info.fabric_addr, info.zone, info.datacenter);

  idl::RegisterReply reply;
  reply.__set_node_id(id);
  reply.__set_node_epoch(node.node_epoch);
  reply.__set_heartbeat_interval_ms(static_cast<std::int32_t>(options_.heartbeat_interval.count()));
  reply.__set_lease_ms(static_cast<std::int32_t>(lease().count()));
  reply.__set_admin_secret(admin_secret_locked(id));
  reply.__set_controller_epoch(controller_epoch_);
  return reply;
}

Result<idl::HeartbeatReply> Controller::heartbeat(const idl::HeartbeatRequest& request) {
  idl::HeartbeatReply reply;
  reply.__set_controller_epoch(controller_epoch_.load());
  // The lease is renewed without mu_: a metadata change holds mu_ while it
  // waits for ZooKeeper (up to its connect timeout), and a lease that waited
  // behind it would lapse and stop the node's chains. The detector renews
  // only the incarnation it tracks, and never a node held for eviction (the
  // verdict holds it at once); anything else is answered below, from the
  // metadata under mu_. The report is taken now if mu_ is free, else by the
  // next holder (take_heartbeats_locked()).
  if (!halted_ && detector_.renew(request.node_id, request.node_epoch)) {
    {
      MutexLock inbox(heartbeats_mu_);
      heartbeats_[request.node_id] = {request.node_epoch, request.stats};
    }
    if (mu_.try_lock()) {
      take_heartbeats_locked();
      mu_.unlock();
    }
    reply.__set_fenced(false);
    return reply;
  }
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto* node = node_locked(request.node_id);
  if (node == nullptr) {
    return make_error(idl::ErrorCode::UNKNOWN_NODE,
                      fmt::format("node '{}' is not registered: call registerNode", request.node_id));
  }
  if (node->dead || request.node_epoch != node->node_epoch) {
    reply.__set_fenced(true);  // a retired incarnation: it must drop its roles and re-register
    return reply;
  }
  detector_.heartbeat(request.node_id);  // ends a hold: the node is not being evicted
  take_heartbeats_locked();              // older reports first
  take_heartbeat_locked(request.node_id, request.stats);
  reply.__set_fenced(false);
  return reply;
}

void Controller::take_heartbeats_locked() {
  std::map<std::string, std::pair<std::int64_t, idl::NodeStats>> beats;
  std::vector<idl::FailureReport> failures;
  {
    MutexLock inbox(heartbeats_mu_);
    if (heartbeats_.empty() && queued_reports_.empty()) return;
    beats.swap(heartbeats_);
    failures.swap(queued_reports_);
  }
  for (const auto& [node_id, beat] : beats) {
    const auto* node = node_locked(node_id);
    // Evicted or registered again since: that incarnation's report is stale.
    if (node == nullptr || node->dead || node->node_epoch != beat.first) continue;
    take_heartbeat_locked(node_id, beat.second);
  }
  for (const auto& failure : failures) {
    if (auto r = report_failure_locked(failure); !r) {
      spdlog::debug("queued failure report by '{}' about {} not taken: {}", failure.reporter,
                    failure.suspect_node_id, r.error().describe());
    }
  }
}

void Controller::take_heartbeat_locked(const std::string& node_id, const idl::NodeStats& stats) {
  stats_[node_id] = stats;
  note_progress_locked(stats);
  drop_strays_locked(node_id, stats);
  if (auto it = backoff_.find(node_id); it != backoff_.end()) {
    it->second.next_attempt = clock_.now();  // it is reachable again: retry its pushes next tick
  }
}

Result<idl::ChannelInfo> Controller::create_channel(const idl::ChannelConfig& config) {
  idl::ChannelInfo info;
  {
    MutexLock lock(mu_);
    if (auto r = check_running_locked(); !r) return r.error();
    if (auto r = validate_channel_config(config); !r) return r.error();
    if (store_->state().channels.count(config.name) != 0) {
      return make_error(idl::ErrorCode::CHANNEL_EXISTS,
                        fmt::format("channel '{}' already exists", config.name));
    }
    if (auto r =
            check_quota_locked(config.name, 1, config.partitions, 0,
                               std::int64_t{config.partitions} * config.replication * config.segment_bytes);
        !r) {
      return r.error();
    }
    Placement placement(candidates_for_locked(config.name));  // within its tenant's zones
    meta::ChannelRecord channel;
    channel.__set_config(config);
    channel.__set_first_epoch(store_->state().channel_epoch_floor + 1);
    for (std::int32_t p = 0; p < config.partitions; ++p) {
      auto route = place_route_locked(placement, config, p);
      if (!route) return route.error();
      channel.routes.push_back(std::move(*route));
    }
    channel.__isset.routes = true;
    meta::MetaRecord record;
    record.__set_put_channel(channel);
    if (auto r = store_->commit(record); !r) return r.error();
    if (crash_locked("create.committed")) return make_error(idl::ErrorCode::INTERNAL, "controller halted");
    spdlog::info("channel '{}' created: {} partition(s), replication {}, segment {} B, ttl {} ms",
                 config.name, config.partitions, config.replication, config.segment_bytes, config.ttl_ms);
    info = channel_info(channel);
  }
  // Durable first, then pushed: a failed push is retried by tick(), the
  // route itself is never lost. Drops of a deleted channel of the same name
  // go first.
  retry_drops();
  run_pushes();
  await_channel_pushes(config.name);
  return info;
}

Result<idl::PartitionRoute> Controller::place_route_locked(Placement& placement,
                                                           const idl::ChannelConfig& config, std::int32_t p) {
  auto chosen = placement.choose_chain(config.replication);  // head first, roles spread
  if (!chosen) {
    std::string within;
    const std::string tenant(namespace_of(config.name));
    if (const auto t = store_->state().tenants.find(tenant);
        t != store_->state().tenants.end() && !t->second.quotas.zones.empty()) {
      within = fmt::format(" in the zones tenant '{}' allows ({})", tenant,
                           fmt::join(t->second.quotas.zones, ", "));
    }
    return make_error(chosen.code(),
                      fmt::format("channel '{}' needs {} alive nodes{} for replication {}: {}", config.name,
                                  config.replication, within, config.replication, chosen.error().message));
  }
  idl::PartitionRoute route;
  route.__set_channel(config.name);
  route.__set_partition(p);
  // Above every epoch of a deleted channel: a node that still holds one of
  // its partitions under this name refuses nothing of the new one.
  route.__set_epoch(store_->state().channel_epoch_floor + 1);
  route.__set_start_offset(0);
  for (const auto& id : *chosen) route.replicas.push_back(replica_of(*node_locked(id)));
  route.__isset.replicas = true;
  return route;
}

void Controller::await_channel_pushes(const std::string& channel) {
  // A tick running at the same time may have claimed some of the pushes
  // first (pushing_), and then run_pushes() skipped them: wait for that
  // tick's answers too, so that the channel has been pushed when the caller
  // returns, as createChannel promises. Each push is bounded by the admin
  // client's timeout.
  UniqueLock lock(mu_);
  lock.wait(pushes_done_, [&] {
    mu_.assert_held();  // the wait holds it when it asks
    return halted_ || std::none_of(pushing_.begin(), pushing_.end(),
                                   [&](const auto& p) { return p.second.first == channel; });
  });
}

Result<std::vector<idl::ChannelInfo>> Controller::list_channels() const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  std::vector<idl::ChannelInfo> out;
  for (const auto& [name, ch] : store_->state().channels) out.push_back(channel_info(ch));
  return out;
}

Result<idl::ChannelInfo> Controller::describe_channel(const std::string& name) const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  auto ch = channel_locked(name);
  if (!ch) return ch.error();
  return channel_info(**ch);
}

Result<idl::PartitionRoute> Controller::get_route(const std::string& channel, std::int32_t partition,
                                                  std::int64_t known_epoch) const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  auto route = route_locked(channel, partition);
  if (!route) return route.error();
  if (known_epoch > (*route)->epoch) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("{}/{}: known_epoch {} is newer than the controller's epoch {}", channel,
                                  partition, known_epoch, (*route)->epoch));
  }
  return **route;
}

std::string Controller::access_secret(const std::string& channel, std::int32_t partition) const {
  MutexLock lock(mu_);
  return access_secret_locked(channel, partition);
}

BrokerTarget Controller::broker_target_locked(const std::string& node_id,
                                              const std::string& admin_addr) const {
  BrokerTarget t;
  t.node_id = node_id;
  t.admin_addr = admin_addr;
  t.admin_secret = admin_secret_locked(node_id);
  t.controller_epoch = controller_epoch_;
  return t;
}

std::string Controller::admin_secret_locked(const std::string& node_id) const {
  // As access_secret_locked: no channel name has a newline.
  return link_secret(store_->state().link_key, "broker-admin\n" + node_id, 0, 0);
}

std::string Controller::access_secret_locked(const std::string& channel, std::int32_t partition) const {
  // A newline never appears in a channel name: no channel's link secrets
  // or lineage share this derivation's input. A tenant's channels take its
  // access generation, so rotating its token changes every secret.
  std::int64_t generation = 0;
  const auto& tenants = store_->state().tenants;
  if (auto t = tenants.find(std::string(namespace_of(channel))); t != tenants.end()) {
    generation = t->second.access_generation;
  }
  return link_secret(store_->state().link_key, "access\n" + channel, partition, generation);
}

// mu_ is held for microseconds, except by a change waiting for ZooKeeper:
// a report waits a moment for it (and is answered with its checks, such as
// a stale epoch's current route), unless reports are queued already (mu_ is
// held for long: this one is queued at once too).
bool Controller::lock_for_report() NO_THREAD_SAFETY_ANALYSIS {
  if (mu_.try_lock()) return true;
  {
    MutexLock inbox(heartbeats_mu_);
    if (!queued_reports_.empty()) return false;
  }
  const auto until = std::chrono::steady_clock::now() + kReportWaitsForLock;
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (mu_.try_lock()) return true;
  }
  return false;
}

Result<void> Controller::report_failure(const idl::FailureReport& report) {
  if (!lock_for_report()) {
    MutexLock inbox(heartbeats_mu_);
    if (queued_reports_.size() >= kMaxQueuedReports) {
      return make_error(idl::ErrorCode::UNAVAILABLE,
                        fmt::format("{} failure reports wait for the controller already: report again later",
                                    queued_reports_.size()));
    }
    queued_reports_.push_back(report);
    return {};
  }
  auto r = report_failure_locked(report);
  mu_.unlock();
  return r;
}

Result<void> Controller::report_failure_locked(const idl::FailureReport& report) {
  if (auto r = check_running_locked(); !r) return r.error();
  const auto* node = node_locked(report.suspect_node_id);
  if (node == nullptr) {
    return make_error(idl::ErrorCode::UNKNOWN_NODE, fmt::format("no node '{}'", report.suspect_node_id));
  }
  if (!report.channel.empty()) {
    auto route = route_locked(report.channel, report.partition);
    if (!route) return route.error();
    if (report.epoch < (*route)->epoch) {
      ControlError e =
          make_error(idl::ErrorCode::STALE_EPOCH,
                     fmt::format("{}/{} is at epoch {}, the report is about epoch {}", report.channel,
                                 report.partition, (*route)->epoch, report.epoch));
      e.current_route = **route;
      return e;
    }
    if (report.epoch > (*route)->epoch) {
      return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                        fmt::format("{}/{}: epoch {} is newer than the controller's epoch {}", report.channel,
                                    report.partition, report.epoch, (*route)->epoch));
    }
  }
  if (node->dead) return {};  // already handled
  if (!report.channel.empty())
    note_link_fault_locked(report, **route_locked(report.channel, report.partition));
  detector_.report(
      report.suspect_node_id,
      fmt::format(
          "by '{}'{}: {}", report.reporter,
          report.channel.empty() ? std::string() : fmt::format(" on {}/{}", report.channel, report.partition),
          report.reason));
  return {};
}

Result<idl::PartitionRoute> Controller::declare_partition_lost(const std::string& channel,
                                                               std::int32_t partition) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  auto route = route_locked(channel, partition);
  if (!route) return route.error();
  const idl::PartitionRoute& current = **route;
  if (current.replicas.empty()) return current;  // already emptied: it is being rebuilt
  for (const auto& r : current.replicas) {
    const auto* node = node_locked(r.node_id);
    if (node != nullptr && !node->dead && node->node_epoch == r.node_epoch) {
      return make_error(
          idl::ErrorCode::INVALID_ARGUMENT,
          fmt::format("{}/{}: {} holds it and is not DEAD; a partition is declared lost only when "
                      "every member of its chain is (see `catena status`)",
                      channel, partition, r.node_id));
    }
  }
  idl::PartitionRoute next = current;
  next.__set_epoch(current.epoch + 1);
  next.replicas.clear();
  for (const auto& j : next.joining) {
    if (const auto* n = node_locked(j.node_id); n != nullptr && !n->dead) {
      fences_.push_back(
          FenceJob{broker_target_locked(j.node_id, n->info.admin_addr), channel, partition, next.epoch});
    }
  }
  next.joining.clear();
  meta::MetaRecord record;
  record.__set_put_routes({next});
  if (auto r = store_->commit(record); !r) return r.error();
  std::vector<std::string> was;
  for (const auto& r : current.replicas) was.push_back(r.node_id);
  spdlog::error("{}/{}: declared lost by an operator (its chain was [{}]); rebuilt above offset {}", channel,
                partition, fmt::join(was, " -> "), high_water_locked(channel, partition));
  return next;
}

Result<idl::ClusterStatus> Controller::cluster_status() const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto counts = replica_counts_locked();
  idl::ClusterStatus status;
  for (const auto& [id, node] : store_->state().nodes)
    status.nodes.push_back(node_status_locked(node, counts));
  status.__isset.nodes = true;
  status.__set_repairs_in_progress(static_cast<std::int32_t>(store_->state().intents.size()));
  status.__set_recoveries(recoveries_);
  return status;
}

Result<void> Controller::commit_offset(const std::string& group, const std::string& channel,
                                       std::int32_t partition, std::int64_t offset) {
  UniqueLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r;
  if (auto r = validate_name("group", group, kMaxGroupNameLength); !r) return r;
  if (auto route = route_locked(channel, partition); !route) return route.error();
  if (!group_known_locked(group)) {
    if (auto r = check_quota_locked(group, 0, 0, 1); !r) return r;
  }
  if (offset < 0) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT, fmt::format("offset must be >= 0, got {}", offset));
  }
  // Set as is (it may move back: a subscriber's seek, then commit), sent
  // with the store's background commit like a group member's.
  return commit_queued_offsets(lock, {{group, channel, partition, offset, true}});
}

Result<std::int64_t> Controller::fetch_offset(const std::string& group, const std::string& channel,
                                              std::int32_t partition) const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  if (auto route = route_locked(channel, partition); !route) return route.error();
  const auto& offsets = store_->state().group_offsets;
  if (auto g = offsets.find(group); g != offsets.end()) {
    if (auto c = g->second.find(channel); c != g->second.end()) {
      if (auto p = c->second.find(partition); p != c->second.end()) return p->second;
    }
  }
  return make_error(idl::ErrorCode::NO_OFFSET,
                    fmt::format("group '{}' has no committed offset for {}/{}", group, channel, partition));
}

Result<idl::ProducerIdentity> Controller::init_producer(std::int64_t producer_id, const std::string& tenant) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  if (producer_id < 0 || producer_id >= kIssuedProducerIdBit) {
    return make_error(idl::ErrorCode::INVALID_ARGUMENT,
                      fmt::format("producer_id must be 0 (issue one) or 1..2^62-1, got {}", producer_id));
  }
  if (auto r = take_producer_id_locked(tenant); !r) return r.error();
  const std::int64_t need = producer_id == 0 ? 2 : 1;
  if (next_producer_number_ + need > store_->state().producer_numbers_reserved) {
    meta::MetaRecord record;
    record.__set_producer_numbers_reserved(next_producer_number_ + need + kProducerBlock);
    if (auto r = store_->commit(record); !r) return r.error();
  }
  idl::ProducerIdentity out;
  out.__set_producer_epoch(next_producer_number_++);
  out.__set_producer_id(producer_id != 0 ? producer_id : (kIssuedProducerIdBit | next_producer_number_++));
  return out;
}

}  // namespace catena::control
