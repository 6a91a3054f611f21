#include <algorithm>
#include <atomic>
#include <fmt/format.h>
#include <functional>
#include <initializer_list>
#include <spdlog/spdlog.h>
#include <thrift/transport/TTransport.h>
#include <utility>

#include <catena/control/controller_server.hpp>
#include <catena/control/idl/Controller.h>
#include <catena/control/tenants.hpp>

namespace catena::control {
namespace {

template <class T>
T value_or_throw(Result<T> r) {
  if (!r) throw r.error().to_thrift();
  return std::move(r).value();
}

// Routes go to clients with the partition's access secret, which the
// replicas ask of every client hello.
idl::PartitionRoute with_access(const Controller& c, idl::PartitionRoute route) {
  route.__set_access_secret(c.access_secret(route.channel, route.partition));
  return route;
}
idl::ChannelInfo with_access(const Controller& c, idl::ChannelInfo info) {
  for (auto& r : info.routes) r = with_access(c, std::move(r));
  return info;
}
ThriftServer::Options with_rpc_stats(ThriftServer::Options thrift, std::shared_ptr<RpcStats> stats) {
  if (stats) {
    thrift.on_reply = [stats = std::move(stats)](std::string_view method, bool failed) {
      stats->record(method, failed);
    };
  }
  return thrift;
}

// Server threads kept for brokers' heartbeats and failure reports, which
// never wait for the controller's lock: every other call may (a metadata
// change waiting for ZooKeeper holds it), and holds its thread meanwhile.
constexpr int kThreadsForBrokers = 4;

// What the connections of one server share: the role and, when the
// cluster is closed, the admin token's SHA-256.
struct Shared {
  std::shared_ptr<const ControllerRole> role;
  std::string admin_sha256;  // empty: open mode
  // Runs the maintenance tick now (a failure report: its probe should not
  // wait for the next period).
  std::function<void()> tick_now;
  // Calls other than heartbeats and failure reports inside the controller
  // now, and how many may be (the server's threads less
  // kThreadsForBrokers): past that a call is answered UNAVAILABLE at once,
  // so that calls waiting behind a metadata change never take the threads
  // brokers' heartbeats need (their leases would lapse).
  int max_calls = 12;
  mutable std::atomic<int> calls{0};
};

std::shared_ptr<const Shared> make_shared_state(std::shared_ptr<const ControllerRole> role,
                                                const std::string& admin_token,
                                                std::function<void()> tick_now, int max_calls) {
  auto s = std::make_shared<Shared>();
  s->role = std::move(role);
  s->admin_sha256 = admin_token.empty() ? std::string() : token_sha256(admin_token);
  s->tick_now = std::move(tick_now);
  s->max_calls = max_calls;
  return s;
}

// The controller for one call, counted in Shared::calls while it lives.
class CountedCall {
 public:
  CountedCall(std::shared_ptr<Controller> controller, const Shared* shared)
      : controller_(std::move(controller)), shared_(shared) {}
  ~CountedCall() { shared_->calls.fetch_sub(1, std::memory_order_relaxed); }
  CountedCall(const CountedCall&) = delete;
  CountedCall& operator=(const CountedCall&) = delete;
  Controller* operator->() const { return controller_.get(); }
  Controller& operator*() const { return *controller_; }

 private:
  std::shared_ptr<Controller> controller_;
  const Shared* shared_;
};

// Thin adapter: Thrift calls to Controller calls, errors to CatenaError.
// One per connection (HandlerFactory), holding who the connection is.
// Thread: a connection's calls run one at a time on its own thread.
class ConnectionHandler final : public idl::ControllerIf {
 public:
  explicit ConnectionHandler(std::shared_ptr<const Shared> shared) : shared_(std::move(shared)) {}

  void registerNode(idl::RegisterReply& out, const idl::NodeInfo& info,
                    const std::vector<idl::PartitionProgress>& held) override {
    admin_only("registerNode");
    out = value_or_throw(c()->register_node(info, held));
  }
  void heartbeat(idl::HeartbeatReply& out, const idl::HeartbeatRequest& req) override {
    admin_only("heartbeat");
    out = value_or_throw(broker_c()->heartbeat(req));
  }
  void createChannel(idl::ChannelInfo& out, const idl::ChannelConfig& config) override {
    on_names("createChannel", {config.name});
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->create_channel(config)));
  }
  void listChannels(std::vector<idl::ChannelInfo>& out) override {
    const auto* tenant = caller();
    const auto controller = c();
    out = value_or_throw(controller->list_channels());
    if (tenant != nullptr) {
      std::erase_if(out, [&](const idl::ChannelInfo& ch) { return !in_namespace(*tenant, ch.config.name); });
    }
    for (auto& info : out) info = with_access(*controller, std::move(info));
  }
  void describeChannel(idl::ChannelInfo& out, const std::string& name) override {
    on_names("describeChannel", {name});
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->describe_channel(name)));
  }
  void getRoute(idl::PartitionRoute& out, const std::string& channel, std::int32_t partition,
                std::int64_t known_epoch) override {
    on_names("getRoute", {channel});
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->get_route(channel, partition, known_epoch)));
  }
  void reportFailure(const idl::FailureReport& report) override {
    on_names("reportFailure", {report.channel});
    const auto controller = broker_c();
    if (auto r = controller->report_failure(report); !r) {
      auto e = r.error();
      if (e.current_route) e.current_route = with_access(*controller, std::move(*e.current_route));
      throw e.to_thrift();
    }
    if (shared_->tick_now) shared_->tick_now();
  }
  void declarePartitionLost(idl::PartitionRoute& out, const std::string& channel,
                            std::int32_t partition) override {
    admin_only("declarePartitionLost");
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->declare_partition_lost(channel, partition)));
  }
  void movePartition(idl::PartitionRoute& out, const std::string& channel, std::int32_t partition,
                     const std::vector<std::string>& to) override {
    admin_only("movePartition");
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->move_partition(channel, partition, to)));
  }
  void clusterStatus(idl::ClusterStatus& out) override {
    admin_only("clusterStatus");
    out = value_or_throw(c()->cluster_status());
  }
  void drainNode(idl::NodeStatus& out, const std::string& node_id) override {
    admin_only("drainNode");
    out = value_or_throw(c()->drain_node(node_id));
  }
  void rebalance(idl::RebalancePlan& out, bool dry_run) override {
    admin_only("rebalance");
    out = value_or_throw(c()->rebalance(dry_run));
  }
  void addNode(idl::RebalancePlan& out, const std::string& node_id, bool dry_run) override {
    admin_only("addNode");
    out = value_or_throw(c()->add_node(node_id, dry_run));
  }
  void commitOffset(const std::string& group, const std::string& channel, std::int32_t partition,
                    std::int64_t offset) override {
    on_names("commitOffset", {group, channel});
    if (auto r = c()->commit_offset(group, channel, partition, offset); !r) throw r.error().to_thrift();
  }
  std::int64_t fetchOffset(const std::string& group, const std::string& channel,
                           std::int32_t partition) override {
    on_names("fetchOffset", {group, channel});
    return value_or_throw(c()->fetch_offset(group, channel, partition));
  }
  void initProducer(idl::ProducerIdentity& out, std::int64_t producer_id) override {
    // Producer ids are not namespaced: any identity may take one, a tenant
    // within its max_producer_ids_per_minute.
    const auto* tenant = caller();
    out = value_or_throw(c()->init_producer(producer_id, tenant != nullptr ? *tenant : std::string()));
  }
  void alterChannel(idl::ChannelInfo& out, const std::string& name, std::int32_t partitions) override {
    on_names("alterChannel", {name});
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->alter_channel(name, partitions)));
  }
  void alterRetention(idl::ChannelInfo& out, const std::string& name, std::int64_t ttl_ms) override {
    on_names("alterRetention", {name});
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->alter_retention(name, ttl_ms)));
  }
  void deleteChannel(const std::string& name) override {
    on_names("deleteChannel", {name});
    if (auto r = c()->delete_channel(name); !r) throw r.error().to_thrift();
  }
  void joinGroup(idl::GroupAssignment& out, const std::string& group, const std::string& channel,
                 const std::string& member_name, const std::vector<std::int32_t>& owned) override {
    on_names("joinGroup", {group, channel});
    out = value_or_throw(c()->join_group(group, channel, member_name, owned));
  }
  void groupHeartbeat(idl::GroupAssignment& out, const std::string& group, const std::string& member_id,
                      const std::vector<std::int32_t>& released) override {
    on_names("groupHeartbeat", {group});
    out = value_or_throw(c()->group_heartbeat(group, member_id, released));
  }
  void leaveGroup(const std::string& group, const std::string& member_id) override {
    on_names("leaveGroup", {group});
    if (auto r = c()->leave_group(group, member_id); !r) throw r.error().to_thrift();
  }
  void commitOffsets(const std::string& group, const std::string& channel, const std::string& member_id,
                     std::int64_t generation, const std::vector<idl::PartitionOffset>& offsets) override {
    on_names("commitOffsets", {group, channel});
    if (auto r = c()->commit_offsets(group, channel, member_id, generation, offsets); !r)
      throw r.error().to_thrift();
  }
  void listGroups(std::vector<std::string>& out) override {
    const auto* tenant = caller();
    out = value_or_throw(c()->list_groups());
    if (tenant != nullptr)
      std::erase_if(out, [&](const std::string& g) { return !in_namespace(*tenant, g); });
  }
  void describeGroup(idl::GroupStatus& out, const std::string& group) override {
    on_names("describeGroup", {group});
    out = value_or_throw(c()->describe_group(group));
  }

  void authenticate(idl::Identity& out, const std::string& token) override {
    const std::string sha = token_sha256(token);
    who_ = Who::none;
    tenant_.clear();
    token_sha256_.clear();
    if (!shared_->admin_sha256.empty() && same_secret(sha, shared_->admin_sha256)) {
      who_ = Who::admin;
      out.__set_admin(true);
      return;
    }
    auto tenant = c()->tenant_of_token(sha);
    if (!tenant) {
      if (tenant.code() == idl::ErrorCode::UNAUTHENTICATED) spdlog::warn("refused a token ({})", peer_);
      throw tenant.error().to_thrift();
    }
    who_ = Who::tenant;
    tenant_ = std::move(*tenant);
    token_sha256_ = sha;
    out.__set_admin(false);
    out.__set_tenant(tenant_);
  }
  void createTenant(std::string& out, const std::string& name, const idl::TenantQuotas& quotas) override {
    admin_only("createTenant");
    out = value_or_throw(c()->create_tenant(name, quotas));
  }
  void listTenants(std::vector<idl::TenantInfo>& out) override {
    admin_only("listTenants");
    out = value_or_throw(c()->list_tenants());
  }
  void deleteTenant(const std::string& name) override {
    admin_only("deleteTenant");
    if (auto r = c()->delete_tenant(name); !r) throw r.error().to_thrift();
  }
  void rotateTenantToken(std::string& out, const std::string& name) override {
    admin_only("rotateTenantToken");
    out = value_or_throw(c()->rotate_tenant_token(name));
  }
  void alterTenant(const std::string& name, const idl::TenantQuotas& quotas) override {
    admin_only("alterTenant");
    if (auto r = c()->alter_tenant(name, quotas); !r) throw r.error().to_thrift();
  }

  void set_peer(std::string peer) { peer_ = std::move(peer); }

 private:
  enum class Who : std::uint8_t { none, admin, tenant };

  // The controller, for a call that may wait for its lock: at most
  // Shared::max_calls at once (UNAVAILABLE past that).
  CountedCall c() const {
    auto controller = value_or_throw(shared_->role->serving());
    if (shared_->calls.fetch_add(1, std::memory_order_relaxed) >= shared_->max_calls) {
      const int now = shared_->calls.fetch_sub(1, std::memory_order_relaxed) - 1;
      throw make_error(idl::ErrorCode::UNAVAILABLE,
                       fmt::format("the controller is busy: {} calls are waiting for it (a metadata change "
                                   "waiting for ZooKeeper?); call again shortly",
                                   now))
          .to_thrift();
    }
    return CountedCall(std::move(controller), shared_.get());
  }
  // For brokers' heartbeats and failure reports, which do not wait for the
  // controller's lock (Controller::heartbeat, report_failure): uncounted.
  std::shared_ptr<Controller> broker_c() const { return value_or_throw(shared_->role->serving()); }

  // The tenant this connection acts for, or null for the admin (an
  // unauthenticated connection is the admin in open mode). Throws
  // UNAUTHENTICATED otherwise, and for a tenant whose token was rotated or
  // which was deleted since it authenticated.
  const std::string* caller() const {
    switch (who_) {
      case Who::admin:
        return nullptr;
      case Who::tenant:
        if (auto r = c()->check_tenant(tenant_, token_sha256_); !r) throw r.error().to_thrift();
        return &tenant_;
      case Who::none:
        break;
    }
    if (shared_->admin_sha256.empty()) return nullptr;
    throw make_error(idl::ErrorCode::UNAUTHENTICATED,
                     "this controller requires authentication: call authenticate with the admin's or a "
                     "tenant's token first (catena --token, $CATENA_TOKEN)")
        .to_thrift();
  }
  void admin_only(std::string_view call) const {
    if (const auto* tenant = caller()) {
      throw make_error(idl::ErrorCode::PERMISSION_DENIED,
                       fmt::format("{} is for the admin; tenant '{}' may not call it", call, *tenant))
          .to_thrift();
    }
  }
  // A tenant may name only channels and groups of its namespace; the answer
  // is the same whether such a channel exists or not.
  void on_names(std::string_view call, std::initializer_list<std::string_view> names) const {
    const auto* tenant = caller();
    if (tenant == nullptr) return;
    for (const auto name : names) {
      if (in_namespace(*tenant, name)) continue;
      throw make_error(idl::ErrorCode::PERMISSION_DENIED,
                       fmt::format("{}: '{}' is outside tenant '{}''s namespace (names starting with '{}{}')",
                                   call, name.substr(0, 160), *tenant, *tenant, kTenantSeparator))
          .to_thrift();
    }
  }

  std::shared_ptr<const Shared> shared_;
  std::string peer_;
  Who who_ = Who::none;
  std::string tenant_;
  std::string token_sha256_;
};

class HandlerFactory final : public idl::ControllerIfFactory {
 public:
  explicit HandlerFactory(std::shared_ptr<const Shared> shared) : shared_(std::move(shared)) {}
  idl::ControllerIf* getHandler(const apache::thrift::TConnectionInfo& info) override {
    auto* h = new ConnectionHandler(shared_);
    // ThriftServer's transport answers the peer as numbers, no name lookup.
    if (info.transport) h->set_peer(info.transport->getOrigin());
    return h;
  }
  void releaseHandler(idl::ControllerIf* handler) override { delete handler; }

 private:
  std::shared_ptr<const Shared> shared_;
};

std::shared_ptr<ControllerRole> leading_role(Controller& controller) {
  auto role = std::make_shared<ControllerRole>();
  role->lead(std::shared_ptr<Controller>(std::shared_ptr<Controller>(), &controller));  // not owned
  return role;
}

}  // namespace

void ControllerRole::lead(std::shared_ptr<Controller> c) {
  MutexLock lock(mu_);
  if (halted_.empty()) controller_ = std::move(c);
}

void ControllerRole::follow(std::string leader_address) {
  MutexLock lock(mu_);
  controller_.reset();  // a leader that resigned
  leader_ = std::move(leader_address);
}

void ControllerRole::halt(std::string why) {
  MutexLock lock(mu_);
  controller_.reset();
  leader_.clear();
  halted_ = why.empty() ? "halted" : std::move(why);
}

Result<std::shared_ptr<Controller>> ControllerRole::serving() const {
  MutexLock lock(mu_);
  if (controller_) return controller_;
  if (!halted_.empty()) {
    return make_error(idl::ErrorCode::NOT_LEADER,
                      fmt::format("this controller stopped leading: {}", halted_));
  }
  if (leader_.empty()) {
    return make_error(idl::ErrorCode::NOT_LEADER,
                      "this controller is not the leader, and no leader is elected yet");
  }
  auto e = make_error(idl::ErrorCode::NOT_LEADER,
                      fmt::format("this controller is not the leader; the leader is {}", leader_));
  e.leader_address = leader_;
  return e;
}

std::shared_ptr<Controller> ControllerRole::leading() const {
  MutexLock lock(mu_);
  return controller_;
}

void RpcStats::record(std::string_view method, bool failed) {
  MutexLock lock(mu_);
  auto it = counts_.find(method);
  if (it == counts_.end()) it = counts_.emplace(std::string(method), Count{}).first;
  ++it->second.calls;
  if (failed) ++it->second.errors;
}

std::map<std::string, RpcStats::Count> RpcStats::snapshot() const {
  MutexLock lock(mu_);
  return {counts_.begin(), counts_.end()};
}

std::shared_ptr<apache::thrift::TProcessor> make_connection_processor(std::shared_ptr<ControllerRole> role,
                                                                      const std::string& admin_token) {
  // No server here: its threads' share is the default's.
  auto shared = make_shared_state(std::move(role), admin_token, {}, 16 - kThreadsForBrokers);
  return std::make_shared<idl::ControllerProcessor>(std::make_shared<ConnectionHandler>(std::move(shared)));
}

ControllerServer::ControllerServer(Controller& controller, Options options)
    : ControllerServer(leading_role(controller), std::move(options)) {}

ControllerServer::ControllerServer(std::shared_ptr<ControllerRole> role, Options options)
    : role_(std::move(role)),
      tick_interval_(options.tick_interval),
      server_(std::make_shared<idl::ControllerProcessorFactory>(
                  std::make_shared<HandlerFactory>(make_shared_state(
                      role_, options.admin_token, [this] { tick_now(); },
                      std::max(1, options.thrift.threads - kThreadsForBrokers)))),
              with_rpc_stats(std::move(options.thrift), options.rpc_stats)),
      role_balance_interval_(options.role_balance_interval) {}

ControllerServer::~ControllerServer() {
  stop();
}

Result<void> ControllerServer::start() {
  if (auto r = server_.start(); !r) return r;
  if (tick_interval_.count() > 0) maintenance_thread_ = std::thread([this] { maintenance_loop(); });
  if (role_balance_interval_.count() > 0) role_balance_thread_ = std::thread([this] { role_balance_loop(); });
  return {};
}

void ControllerServer::role_balance_loop() {
  for (;;) {
    {
      UniqueLock lock(mu_);
      if (lock.wait_for(wake_, role_balance_interval_, [this] {
            mu_.assert_held();
            return stopping_;
          })) {
        return;
      }
    }
    auto c = role_->leading();
    if (!c) continue;  // a follower: the leader balances
    auto plan = c->balance_roles();
    if (!plan) {
      spdlog::warn("role balance: {}", plan.error().describe());
      continue;
    }
    for (const auto& m : plan->moves) {
      if (!m.error.empty()) spdlog::warn("role balance: {}/{}: {}", m.channel, m.partition, m.error);
    }
  }
}

void ControllerServer::maintenance_loop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    const auto started = std::chrono::steady_clock::now();
    if (auto c = role_->leading()) c->tick();
    ticks_.fetch_add(1, std::memory_order_relaxed);
    UniqueLock lock(mu_);
    (void)lock.wait_for(wake_, tick_interval_, [this] {
      mu_.assert_held();  // the wait holds it when it asks
      return stopping_ || tick_requested_;
    });
    if (stopping_) return;
    if (tick_requested_) {
      // Woken early (a failure report): at most once per min_gap_ after the
      // last tick began, so a flood of reports cannot keep the controller
      // ticking back to back.
      (void)lock.wait_until(wake_, started + min_gap_, [this] {
        mu_.assert_held();
        return stopping_;
      });
      if (stopping_) return;
    }
    tick_requested_ = false;
  }
}

void ControllerServer::tick_now() {
  {
    MutexLock lock(mu_);
    tick_requested_ = true;
  }
  wake_.notify_all();
}

void ControllerServer::stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  server_.stop();
  if (maintenance_thread_.joinable()) maintenance_thread_.join();
  if (role_balance_thread_.joinable()) role_balance_thread_.join();
}

}  // namespace catena::control
