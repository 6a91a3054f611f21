// A typed client for the Controller service, for brokers, the CLI and the
// client library.
//
// It holds one connection, opened on first use (or by connect()) and
// reopened on the next call after any transport failure; a connection the
// server closed while idle is noticed and replaced before a call is sent.
// Calls are never retried behind your back: an UNAVAILABLE answer means the
// call may or may not have reached the controller, and only the caller knows
// whether repeating it is safe (createChannel, for one, is not).
//
// Several controllers (one leader on a zk:// location): address may list
// them, "a:7400,b:7400". A connect failure tries the next one; a NOT_LEADER
// answer is followed to the leader it names (or, naming none, to the next
// address), at most a few times per call, then returned. The call is only
// repeated where it did nothing: a failed connect or a NOT_LEADER answer.
// The client stays with the controller that answered.
//
// Errors: UNAVAILABLE for connect failures and timeouts; otherwise the
// controller's CatenaError code, message and (STALE_EPOCH) current_route.
//
// Thread: thread-safe; calls are serialised on the one connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <catena/control/idl/catena_types.h>
#include <catena/control/result.hpp>
#include <catena/fabric/thread_annotations.hpp>

namespace catena::control {

class ControllerClient {
 public:
  struct Options {
    std::string address = "127.0.0.1:7400";  // host:port[,host:port...]
    std::chrono::milliseconds connect_timeout{1000};
    std::chrono::milliseconds rpc_timeout{5000};
    // Non-empty: authenticate with it on every new connection (connects,
    // reconnects, leader switches) before any other call (README "Tenants").
    std::string token;
  };

  explicit ControllerClient(Options options);
  ~ControllerClient();
  ControllerClient(const ControllerClient&) = delete;
  ControllerClient& operator=(const ControllerClient&) = delete;

  // Connects now instead of on the first call.
  [[nodiscard]] static Result<std::unique_ptr<ControllerClient>> connect(Options options);

  // held: replicas this process kept after being fenced (see registerNode).
  [[nodiscard]] Result<idl::RegisterReply> register_node(
      const idl::NodeInfo& info, const std::vector<idl::PartitionProgress>& held = {});
  [[nodiscard]] Result<idl::HeartbeatReply> heartbeat(const idl::HeartbeatRequest& request);
  [[nodiscard]] Result<idl::ChannelInfo> create_channel(const idl::ChannelConfig& config);
  [[nodiscard]] Result<std::vector<idl::ChannelInfo>> list_channels();
  [[nodiscard]] Result<idl::ChannelInfo> describe_channel(const std::string& name);
  [[nodiscard]] Result<idl::PartitionRoute> get_route(const std::string& channel, std::int32_t partition,
                                                      std::int64_t known_epoch = 0);
  [[nodiscard]] Result<void> report_failure(const idl::FailureReport& report);
  [[nodiscard]] Result<idl::PartitionRoute> declare_partition_lost(const std::string& channel,
                                                                   std::int32_t partition);
  // Waits for the move (sealing, committing, the new chain installed): give
  // the client an rpc timeout of several seconds.
  [[nodiscard]] Result<idl::PartitionRoute> move_partition(const std::string& channel, std::int32_t partition,
                                                           const std::vector<std::string>& to);
  [[nodiscard]] Result<idl::ClusterStatus> cluster_status();
  // Waits for every marker (Controller.alterChannel): give the client an rpc
  // timeout of several seconds.
  [[nodiscard]] Result<idl::ChannelInfo> alter_channel(const std::string& name, std::int32_t partitions);
  // Controller.alterRetention: the channel's ttl_ms, pushed to its replicas.
  [[nodiscard]] Result<idl::ChannelInfo> alter_retention(const std::string& name, std::int64_t ttl_ms);
  // Controller.deleteChannel: the channel and its data, on every node.
  [[nodiscard]] Result<void> delete_channel(const std::string& name);
  // Starts a drain and returns (Controller.drainNode); poll cluster_status()
  // until the node is DRAINED.
  [[nodiscard]] Result<idl::NodeStatus> drain_node(const std::string& node_id);
  // Waits for every move of the plan unless dry_run: give the client an rpc
  // timeout of several seconds per move.
  [[nodiscard]] Result<idl::RebalancePlan> rebalance(bool dry_run);
  // Rebalances onto a registered node (Controller.addNode); as long as rebalance().
  [[nodiscard]] Result<idl::RebalancePlan> add_node(const std::string& node_id, bool dry_run);
  [[nodiscard]] Result<void> commit_offset(const std::string& group, const std::string& channel,
                                           std::int32_t partition, std::int64_t offset);
  // A new producer epoch (and id, if producer_id is 0): Controller.initProducer.
  [[nodiscard]] Result<idl::ProducerIdentity> init_producer(std::int64_t producer_id);
  // NO_OFFSET if the group never committed one for that partition.
  [[nodiscard]] Result<std::int64_t> fetch_offset(const std::string& group, const std::string& channel,
                                                  std::int32_t partition);

  // Subscriber groups (see catena.thrift).
  [[nodiscard]] Result<idl::GroupAssignment> join_group(const std::string& group, const std::string& channel,
                                                        const std::string& member_name,
                                                        const std::vector<std::int32_t>& owned);
  [[nodiscard]] Result<idl::GroupAssignment> group_heartbeat(const std::string& group,
                                                             const std::string& member_id,
                                                             const std::vector<std::int32_t>& released);
  [[nodiscard]] Result<void> leave_group(const std::string& group, const std::string& member_id);
  [[nodiscard]] Result<void> commit_offsets(const std::string& group, const std::string& channel,
                                            const std::string& member_id, std::int64_t generation,
                                            const std::vector<idl::PartitionOffset>& offsets);
  [[nodiscard]] Result<std::vector<std::string>> list_groups();
  [[nodiscard]] Result<idl::GroupStatus> describe_group(const std::string& group);

  // Tenants (see catena.thrift). authenticate() binds token to the current
  // connection only; set Options::token to have every connection do it.
  [[nodiscard]] Result<idl::Identity> authenticate(const std::string& token);
  [[nodiscard]] Result<std::string> create_tenant(const std::string& name, const idl::TenantQuotas& quotas);
  [[nodiscard]] Result<std::vector<idl::TenantInfo>> list_tenants();
  [[nodiscard]] Result<void> delete_tenant(const std::string& name);
  [[nodiscard]] Result<std::string> rotate_tenant_token(const std::string& name);
  [[nodiscard]] Result<void> alter_tenant(const std::string& name, const idl::TenantQuotas& quotas);

  // The controller this client talks to now (one of the addresses, or the
  // leader one named).
  [[nodiscard]] std::string address() const EXCLUDES(mu_);

  void close();

 private:
  struct Impl;
  template <class Fn>
  Result<void> call(Fn&& fn) EXCLUDES(mu_);

  mutable Mutex mu_;  // one call at a time on the one connection
  std::unique_ptr<Impl> impl_ PT_GUARDED_BY(mu_);
};

}  // namespace catena::control
