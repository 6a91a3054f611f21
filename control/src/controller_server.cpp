#include <fmt/format.h>
#include <utility>

#include <catena/control/controller_server.hpp>
#include <catena/control/idl/Controller.h>

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

// Thin adapter: Thrift calls to Controller calls, errors to CatenaError.
class Handler final : public idl::ControllerIf {
 public:
  explicit Handler(std::shared_ptr<const ControllerRole> role) : role_(std::move(role)) {}

  void registerNode(idl::RegisterReply& out, const idl::NodeInfo& info,
                    const std::vector<idl::PartitionProgress>& held) override {
    out = value_or_throw(c()->register_node(info, held));
  }
  void heartbeat(idl::HeartbeatReply& out, const idl::HeartbeatRequest& req) override {
    out = value_or_throw(c()->heartbeat(req));
  }
  void createChannel(idl::ChannelInfo& out, const idl::ChannelConfig& config) override {
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->create_channel(config)));
  }
  void listChannels(std::vector<idl::ChannelInfo>& out) override {
    const auto controller = c();
    out = value_or_throw(controller->list_channels());
    for (auto& info : out) info = with_access(*controller, std::move(info));
  }
  void describeChannel(idl::ChannelInfo& out, const std::string& name) override {
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->describe_channel(name)));
  }
  void getRoute(idl::PartitionRoute& out, const std::string& channel, std::int32_t partition,
                std::int64_t known_epoch) override {
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->get_route(channel, partition, known_epoch)));
  }
  void reportFailure(const idl::FailureReport& report) override {
    const auto controller = c();
    if (auto r = controller->report_failure(report); !r) {
      auto e = r.error();
      if (e.current_route) e.current_route = with_access(*controller, std::move(*e.current_route));
      throw e.to_thrift();
    }
  }
  void declarePartitionLost(idl::PartitionRoute& out, const std::string& channel,
                            std::int32_t partition) override {
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->declare_partition_lost(channel, partition)));
  }
  void movePartition(idl::PartitionRoute& out, const std::string& channel, std::int32_t partition,
                     const std::vector<std::string>& to) override {
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->move_partition(channel, partition, to)));
  }
  void clusterStatus(idl::ClusterStatus& out) override { out = value_or_throw(c()->cluster_status()); }
  void drainNode(idl::NodeStatus& out, const std::string& node_id) override {
    out = value_or_throw(c()->drain_node(node_id));
  }
  void rebalance(idl::RebalancePlan& out, bool dry_run) override {
    out = value_or_throw(c()->rebalance(dry_run));
  }
  void addNode(idl::RebalancePlan& out, const std::string& node_id, bool dry_run) override {
    out = value_or_throw(c()->add_node(node_id, dry_run));
  }
  void commitOffset(const std::string& group, const std::string& channel, std::int32_t partition,
                    std::int64_t offset) override {
    if (auto r = c()->commit_offset(group, channel, partition, offset); !r) throw r.error().to_thrift();
  }
  std::int64_t fetchOffset(const std::string& group, const std::string& channel,
                           std::int32_t partition) override {
    return value_or_throw(c()->fetch_offset(group, channel, partition));
  }
  void initProducer(idl::ProducerIdentity& out, std::int64_t producer_id) override {
    out = value_or_throw(c()->init_producer(producer_id));
  }
  void alterChannel(idl::ChannelInfo& out, const std::string& name, std::int32_t partitions) override {
    const auto controller = c();
    out = with_access(*controller, value_or_throw(controller->alter_channel(name, partitions)));
  }
  void joinGroup(idl::GroupAssignment& out, const std::string& group, const std::string& channel,
                 const std::string& member_name, const std::vector<std::int32_t>& owned) override {
    out = value_or_throw(c()->join_group(group, channel, member_name, owned));
  }
  void groupHeartbeat(idl::GroupAssignment& out, const std::string& group, const std::string& member_id,
                      const std::vector<std::int32_t>& released) override {
    out = value_or_throw(c()->group_heartbeat(group, member_id, released));
  }
  void leaveGroup(const std::string& group, const std::string& member_id) override {
    if (auto r = c()->leave_group(group, member_id); !r) throw r.error().to_thrift();
  }
  void commitOffsets(const std::string& group, const std::string& channel, const std::string& member_id,
                     std::int64_t generation, const std::vector<idl::PartitionOffset>& offsets) override {
    if (auto r = c()->commit_offsets(group, channel, member_id, generation, offsets); !r)
      throw r.error().to_thrift();
  }
  void listGroups(std::vector<std::string>& out) override { out = value_or_throw(c()->list_groups()); }
  void describeGroup(idl::GroupStatus& out, const std::string& group) override {
    out = value_or_throw(c()->describe_group(group));
  }

 private:
  std::shared_ptr<Controller> c() const { return value_or_throw(role_->serving()); }

  std::shared_ptr<const ControllerRole> role_;
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

ControllerServer::ControllerServer(Controller& controller, Options options)
    : ControllerServer(leading_role(controller), std::move(options)) {}

ControllerServer::ControllerServer(std::shared_ptr<ControllerRole> role, Options options)
    : role_(std::move(role)),
      tick_interval_(options.tick_interval),
      server_(std::make_shared<idl::ControllerProcessor>(std::make_shared<Handler>(role_)),
              std::move(options.thrift)) {}

ControllerServer::~ControllerServer() {
  stop();
}

Result<void> ControllerServer::start() {
  if (auto r = server_.start(); !r) return r;
  if (tick_interval_.count() > 0) maintenance_thread_ = std::thread([this] { maintenance_loop(); });
  return {};
}

void ControllerServer::maintenance_loop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
    }
    if (auto c = role_->leading()) c->tick();
    UniqueLock lock(mu_);
    if (lock.wait_for(wake_, tick_interval_, [this] {
          mu_.assert_held();  // the wait holds it when it asks
          return stopping_;
        })) {
      return;
    }
  }
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
}

}  // namespace catena::control
