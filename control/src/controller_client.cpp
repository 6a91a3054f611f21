#include <algorithm>
#include <fmt/format.h>
#include <optional>
#include <spdlog/spdlog.h>
#include <thrift/transport/TTransportException.h>

#include <catena/control/address.hpp>
#include <catena/control/controller_client.hpp>
#include <catena/control/idl/Controller.h>

#include "thrift_socket.hpp"

namespace catena::control {

namespace {

// NOT_LEADER answers followed (or other addresses tried) within one call.
constexpr int kMaxRedirects = 3;

}  // namespace

struct ControllerClient::Impl {
  Options options;
  std::vector<std::string> addresses;  // options.address split at ','
  std::string target;                  // the controller this client talks to (or will first try)
  detail::ThriftConnection link;
  std::unique_ptr<idl::ControllerClient> client;
  bool authenticated = false;  // this connection called authenticate with options.token

  void drop() {
    authenticated = false;
    client.reset();
    link.close();
  }

  // Connects to target, else to each other address in turn; target is
  // then the one that answered.
  Result<void> open() {
    std::vector<std::string> order{target};
    const auto at = std::find(addresses.begin(), addresses.end(), target);
    const std::size_t first =
        at == addresses.end() ? 0 : static_cast<std::size_t>(at - addresses.begin()) + 1;
    for (std::size_t i = 0; i < addresses.size(); ++i) {
      const auto& a = addresses[(first + i) % addresses.size()];
      if (a != target) order.push_back(a);
    }
    ControlError last;
    for (const auto& address : order) {
      auto peer = parse_host_port(address);
      if (!peer) return peer.error();
      auto opened = detail::open_connection(*peer, options.connect_timeout, options.rpc_timeout);
      if (!opened) {
        last = opened.error();
        continue;
      }
      link = std::move(*opened);
      client = std::make_unique<idl::ControllerClient>(link.protocol);
      target = address;
      return {};
    }
    return last;
  }

  // Where a NOT_LEADER answer sends the call next, if anywhere.
  std::optional<std::string> redirect(const ControlError& e) const {
    if (e.code != idl::ErrorCode::NOT_LEADER) return std::nullopt;
    if (e.leader_address && !e.leader_address->empty() && *e.leader_address != target) {
      return e.leader_address;
    }
    if (addresses.size() < 2) return std::nullopt;  // one address: nowhere else to ask
    const auto at = std::find(addresses.begin(), addresses.end(), target);
    const std::size_t next = at == addresses.end() ? 0 : static_cast<std::size_t>(at - addresses.begin()) + 1;
    return addresses[next % addresses.size()];
  }
};

ControllerClient::ControllerClient(Options options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  // A malformed list is reported by the first call (open() parses each).
  auto list = parse_address_list(impl_->options.address);
  impl_->addresses = list ? std::move(*list) : std::vector<std::string>{impl_->options.address};
  impl_->target = impl_->addresses.front();
}

ControllerClient::~ControllerClient() {
  close();
}

std::string ControllerClient::address() const {
  MutexLock lock(mu_);
  return impl_->target;
}

void ControllerClient::close() {
  MutexLock lock(mu_);
  impl_->drop();
}

Result<std::unique_ptr<ControllerClient>> ControllerClient::connect(Options options) {
  auto client = std::make_unique<ControllerClient>(std::move(options));
  if (auto r = client->call([](idl::ControllerClient&) {}); !r) return r.error();
  return client;
}

template <class Fn>
Result<void> ControllerClient::call(Fn&& fn) {
  MutexLock lock(mu_);
  auto& s = *impl_;
  for (int redirects = 0;; ++redirects) {
    if (s.client && s.link.stale()) s.drop();
    if (!s.client) {
      if (auto r = s.open(); !r) return r;
    }
    try {
      if (!s.authenticated && !s.options.token.empty()) {
        idl::Identity who;
        s.client->authenticate(who, s.options.token);
        s.authenticated = true;
      }
      fn(*s.client);
      return {};
    } catch (const idl::CatenaError& e) {
      auto error = ControlError::from_thrift(e);
      // A follower (or a halted leader) did nothing: asking the leader is safe.
      auto next = s.redirect(error);
      if (!next || redirects == kMaxRedirects) return error;
      spdlog::debug("controller {} is not the leader ({}); asking {}", s.target, error.message, *next);
      s.drop();
      s.target = std::move(*next);
    } catch (const apache::thrift::transport::TTransportException& e) {
      s.drop();
      return make_error(idl::ErrorCode::UNAVAILABLE, fmt::format("controller {}: {}", s.target, e.what()));
    } catch (const std::exception& e) {
      s.drop();
      return make_error(idl::ErrorCode::INTERNAL, fmt::format("controller {}: {}", s.target, e.what()));
    }
  }
}

Result<idl::RegisterReply> ControllerClient::register_node(const idl::NodeInfo& info,
                                                           const std::vector<idl::PartitionProgress>& held) {
  idl::RegisterReply out;
  if (auto r = call([&](idl::ControllerClient& c) { c.registerNode(out, info, held); }); !r) return r.error();
  return out;
}

Result<idl::HeartbeatReply> ControllerClient::heartbeat(const idl::HeartbeatRequest& request) {
  idl::HeartbeatReply out;
  if (auto r = call([&](idl::ControllerClient& c) { c.heartbeat(out, request); }); !r) return r.error();
  return out;
}

Result<idl::ChannelInfo> ControllerClient::create_channel(const idl::ChannelConfig& config) {
  idl::ChannelInfo out;
  if (auto r = call([&](idl::ControllerClient& c) { c.createChannel(out, config); }); !r) return r.error();
  return out;
}

Result<std::vector<idl::ChannelInfo>> ControllerClient::list_channels() {
  std::vector<idl::ChannelInfo> out;
  if (auto r = call([&](idl::ControllerClient& c) { c.listChannels(out); }); !r) return r.error();
  return out;
}

Result<idl::ChannelInfo> ControllerClient::describe_channel(const std::string& name) {
  idl::ChannelInfo out;
  if (auto r = call([&](idl::ControllerClient& c) { c.describeChannel(out, name); }); !r) return r.error();
  return out;
}

Result<idl::PartitionRoute> ControllerClient::get_route(const std::string& channel, std::int32_t partition,
                                                        std::int64_t known_epoch) {
  idl::PartitionRoute out;
  if (auto r = call([&](idl::ControllerClient& c) { c.getRoute(out, channel, partition, known_epoch); });
      !r) {
    return r.error();
  }
  return out;
}

Result<void> ControllerClient::report_failure(const idl::FailureReport& report) {
  return call([&](idl::ControllerClient& c) { c.reportFailure(report); });
}

Result<idl::PartitionRoute> ControllerClient::declare_partition_lost(const std::string& channel,
                                                                     std::int32_t partition) {
  idl::PartitionRoute out;
  if (auto r = call([&](idl::ControllerClient& c) { c.declarePartitionLost(out, channel, partition); }); !r) {
    return r.error();
  }
  return out;
}

Result<idl::PartitionRoute> ControllerClient::move_partition(const std::string& channel,
                                                             std::int32_t partition,
                                                             const std::vector<std::string>& to) {
  idl::PartitionRoute out;
  if (auto r = call([&](idl::ControllerClient& c) { c.movePartition(out, channel, partition, to); }); !r) {
    return r.error();
  }
  return out;
}

Result<idl::ChannelInfo> ControllerClient::alter_channel(const std::string& name, std::int32_t partitions) {
  idl::ChannelInfo out;
  if (auto r = call([&](idl::ControllerClient& c) { c.alterChannel(out, name, partitions); }); !r) {
    return r.error();
  }
  return out;
}

Result<idl::ChannelInfo> ControllerClient::alter_retention(const std::string& name, std::int64_t ttl_ms) {
  idl::ChannelInfo out;
  if (auto r = call([&](idl::ControllerClient& c) { c.alterRetention(out, name, ttl_ms); }); !r) {
    return r.error();
  }
  return out;
}

Result<void> ControllerClient::delete_channel(const std::string& name) {
  return call([&](idl::ControllerClient& c) { c.deleteChannel(name); });
}

Result<idl::ClusterStatus> ControllerClient::cluster_status() {
  idl::ClusterStatus out;
  if (auto r = call([&](idl::ControllerClient& c) { c.clusterStatus(out); }); !r) return r.error();
  return out;
}

Result<idl::NodeStatus> ControllerClient::drain_node(const std::string& node_id) {
  idl::NodeStatus out;
  if (auto r = call([&](idl::ControllerClient& c) { c.drainNode(out, node_id); }); !r) return r.error();
  return out;
}

Result<idl::RebalancePlan> ControllerClient::rebalance(bool dry_run) {
  idl::RebalancePlan out;
  if (auto r = call([&](idl::ControllerClient& c) { c.rebalance(out, dry_run); }); !r) return r.error();
  return out;
}

Result<idl::RebalancePlan> ControllerClient::add_node(const std::string& node_id, bool dry_run) {
  idl::RebalancePlan out;
  if (auto r = call([&](idl::ControllerClient& c) { c.addNode(out, node_id, dry_run); }); !r)
    return r.error();
  return out;
}

Result<void> ControllerClient::commit_offset(const std::string& group, const std::string& channel,
                                             std::int32_t partition, std::int64_t offset) {
  return call([&](idl::ControllerClient& c) { c.commitOffset(group, channel, partition, offset); });
}

Result<std::int64_t> ControllerClient::fetch_offset(const std::string& group, const std::string& channel,
                                                    std::int32_t partition) {
  std::int64_t out = 0;
  if (auto r = call([&](idl::ControllerClient& c) { out = c.fetchOffset(group, channel, partition); }); !r) {
    return r.error();
  }
  return out;
}

Result<idl::ProducerIdentity> ControllerClient::init_producer(std::int64_t producer_id) {
  idl::ProducerIdentity out;
  if (auto r = call([&](idl::ControllerClient& c) { c.initProducer(out, producer_id); }); !r)
    return r.error();
  return out;
}

Result<idl::GroupAssignment> ControllerClient::join_group(const std::string& group,
                                                          const std::string& channel,
                                                          const std::string& member_name,
                                                          const std::vector<std::int32_t>& owned) {
  idl::GroupAssignment out;
  if (auto r = call([&](idl::ControllerClient& c) { c.joinGroup(out, group, channel, member_name, owned); });
      !r) {
    return r.error();
  }
  return out;
}

Result<idl::GroupAssignment> ControllerClient::group_heartbeat(const std::string& group,
                                                               const std::string& member_id,
                                                               const std::vector<std::int32_t>& released) {
  idl::GroupAssignment out;
  if (auto r = call([&](idl::ControllerClient& c) { c.groupHeartbeat(out, group, member_id, released); });
      !r) {
    return r.error();
  }
  return out;
}

Result<void> ControllerClient::leave_group(const std::string& group, const std::string& member_id) {
  return call([&](idl::ControllerClient& c) { c.leaveGroup(group, member_id); });
}

Result<void> ControllerClient::commit_offsets(const std::string& group, const std::string& channel,
                                              const std::string& member_id, std::int64_t generation,
                                              const std::vector<idl::PartitionOffset>& offsets) {
  return call(
      [&](idl::ControllerClient& c) { c.commitOffsets(group, channel, member_id, generation, offsets); });
}

Result<std::vector<std::string>> ControllerClient::list_groups() {
  std::vector<std::string> out;
  if (auto r = call([&](idl::ControllerClient& c) { c.listGroups(out); }); !r) return r.error();
  return out;
}

Result<idl::GroupStatus> ControllerClient::describe_group(const std::string& group) {
  idl::GroupStatus out;
  if (auto r = call([&](idl::ControllerClient& c) { c.describeGroup(out, group); }); !r) return r.error();
  return out;
}

Result<idl::Identity> ControllerClient::authenticate(const std::string& token) {
  idl::Identity out;
  if (auto r = call([&](idl::ControllerClient& c) { c.authenticate(out, token); }); !r) return r.error();
  return out;
}

Result<std::string> ControllerClient::create_tenant(const std::string& name,
                                                    const idl::TenantQuotas& quotas) {
  std::string out;
  if (auto r = call([&](idl::ControllerClient& c) { c.createTenant(out, name, quotas); }); !r)
    return r.error();
  return out;
}

Result<std::vector<idl::TenantInfo>> ControllerClient::list_tenants() {
  std::vector<idl::TenantInfo> out;
  if (auto r = call([&](idl::ControllerClient& c) { c.listTenants(out); }); !r) return r.error();
  return out;
}

Result<void> ControllerClient::delete_tenant(const std::string& name) {
  return call([&](idl::ControllerClient& c) { c.deleteTenant(name); });
}

Result<std::string> ControllerClient::rotate_tenant_token(const std::string& name) {
  std::string out;
  if (auto r = call([&](idl::ControllerClient& c) { c.rotateTenantToken(out, name); }); !r) return r.error();
  return out;
}

Result<void> ControllerClient::alter_tenant(const std::string& name, const idl::TenantQuotas& quotas) {
  return call([&](idl::ControllerClient& c) { c.alterTenant(name, quotas); });
}

}  // namespace catena::control
