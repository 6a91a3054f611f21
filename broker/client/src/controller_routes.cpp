#include <algorithm>
#include <cstring>

#include <catena/broker/controller_routes.hpp>

namespace catena::broker {

namespace idl = control::idl;
using control::ControlError;

client::ErrorCode client_error_of(control::ErrorCode code) noexcept {
  using client::ErrorCode;
  switch (code) {
    case idl::ErrorCode::OK:
      return ErrorCode::ok;
    case idl::ErrorCode::UNKNOWN_CHANNEL:
      return ErrorCode::unknown_channel;
    case idl::ErrorCode::CHANNEL_EXISTS:
    case idl::ErrorCode::INVALID_ARGUMENT:
      return ErrorCode::invalid_argument;
    case idl::ErrorCode::STALE_EPOCH:
    case idl::ErrorCode::NOT_HEAD:
      return ErrorCode::not_ready;
    case idl::ErrorCode::NOT_ENOUGH_NODES:
      return ErrorCode::unavailable;  // until enough nodes are alive
    case idl::ErrorCode::NOT_LEADER:
    case idl::ErrorCode::UNAVAILABLE:
      return ErrorCode::controller_unavailable;
    case idl::ErrorCode::NO_OFFSET:
      return ErrorCode::no_committed_offset;
    case idl::ErrorCode::UNKNOWN_MEMBER:
    case idl::ErrorCode::NOT_OWNER:
      return ErrorCode::not_owner;
    case idl::ErrorCode::UNAUTHENTICATED:  // tenants: no token, a wrong one, or a name not the tenant's
    case idl::ErrorCode::PERMISSION_DENIED:
      return ErrorCode::unauthenticated;
    case idl::ErrorCode::RESOURCE_EXHAUSTED:  // a tenant quota: retrying does not help until it changes
      return ErrorCode::invalid_argument;
    case idl::ErrorCode::UNKNOWN_NODE:  // broker calls; a client never makes them
    case idl::ErrorCode::FENCED:
    case idl::ErrorCode::INTERNAL:
      return ErrorCode::internal;
  }
  return ErrorCode::internal;
}

client::Error to_client_error(const ControlError& e) {
  return client::make_error(client_error_of(e.code), e.describe());
}

ControllerRoutes::ControllerRoutes(control::ControllerClient::Options options, std::string client_name)
    : client_(std::move(options)), name_(std::move(client_name)) {}

Route ControllerRoutes::to_route(const idl::PartitionRoute& r) {
  Route out;
  out.channel = r.channel;
  out.partition = static_cast<std::uint32_t>(r.partition);
  out.epoch = static_cast<std::uint64_t>(r.epoch);
  out.start_offset = static_cast<std::uint64_t>(r.start_offset);
  for (const auto& rep : r.replicas) out.replicas.push_back({rep.node_id, rep.fabric_addr});
  if (r.__isset.access_secret && r.access_secret.size() == out.access_secret.size()) {
    std::memcpy(out.access_secret.data(), r.access_secret.data(), out.access_secret.size());
  }
  for (const auto& s : r.sealed) {
    RouteRange range;
    range.start_offset = static_cast<std::uint64_t>(s.start_offset);
    range.end_offset = static_cast<std::uint64_t>(s.end_offset);
    range.epoch = static_cast<std::uint64_t>(s.epoch);
    for (const auto& rep : s.replicas) range.replicas.push_back({rep.node_id, rep.fabric_addr});
    out.sealed.push_back(std::move(range));
  }
  return out;
}

client::Result<ChannelLayout> ControllerRoutes::layout(const std::string& channel) {
  auto info = client_.describe_channel(channel);
  if (!info) return to_client_error(info.error());
  MutexLock lk(mu_);
  for (const auto& r : info->routes) cache_[{channel, static_cast<std::uint32_t>(r.partition)}] = to_route(r);
  return to_layout(*info);
}

ChannelLayout ControllerRoutes::to_layout(const control::idl::ChannelInfo& info) {
  ChannelLayout out{static_cast<std::uint32_t>(info.config.partitions),
                    static_cast<std::uint32_t>(info.config.segment_bytes), 0,
                    static_cast<std::uint32_t>(info.routes.size())};
  // config.partitions is the last complete generation's count; an open one
  // is not the mapping yet (its heads say remap once their marker is in).
  for (const auto& g : info.generations) {
    if (g.complete)
      out.generation = std::max<std::uint64_t>(out.generation, static_cast<std::uint64_t>(g.generation));
  }
  return out;
}

client::Result<Route> ControllerRoutes::route(const std::string& channel, std::uint32_t partition,
                                              std::uint64_t known_epoch) {
  {
    MutexLock lk(mu_);
    auto it = cache_.find({channel, partition});
    // A cached route newer than the one the caller found wanting is still
    // good, unless it has no replica left: then only the controller knows
    // whether the partition has been rebuilt.
    if (it != cache_.end() && it->second.epoch > known_epoch && !it->second.replicas.empty())
      return it->second;
  }
  auto r = client_.get_route(channel, static_cast<std::int32_t>(partition), 0);
  if (!r) return to_client_error(r.error());
  Route route = to_route(r.value());
  MutexLock lk(mu_);
  cache_[{channel, partition}] = route;
  return route;
}

void ControllerRoutes::report_unreachable(const std::string& node_id, const Route& route,
                                          const std::string& reason) {
  idl::FailureReport rep;
  rep.reporter = name_;
  rep.suspect_node_id = node_id;
  rep.channel = route.channel;
  rep.partition = static_cast<std::int32_t>(route.partition);
  rep.epoch = static_cast<std::int64_t>(route.epoch);
  rep.reason = reason;
  (void)client_.report_failure(rep);
  MutexLock lk(mu_);
  cache_.erase({route.channel, route.partition});  // next lookup asks the controller
}

client::Result<ProducerIdentity> ControllerRoutes::init_producer(std::uint64_t producer_id) {
  auto r = client_.init_producer(static_cast<std::int64_t>(producer_id));
  if (!r) return to_client_error(r.error());
  return ProducerIdentity{static_cast<std::uint64_t>(r->producer_id),
                          static_cast<std::uint64_t>(r->producer_epoch)};
}

client::Result<void> ControllerRoutes::commit_offset(const std::string& group, const std::string& channel,
                                                     std::uint32_t partition, std::uint64_t offset) {
  auto r = client_.commit_offset(group, channel, static_cast<std::int32_t>(partition),
                                 static_cast<std::int64_t>(offset));
  if (!r) return to_client_error(r.error());
  return {};
}

client::Result<std::uint64_t> ControllerRoutes::committed_offset(const std::string& group,
                                                                 const std::string& channel,
                                                                 std::uint32_t partition) {
  auto r = client_.fetch_offset(group, channel, static_cast<std::int32_t>(partition));
  if (!r) return to_client_error(r.error());
  return static_cast<std::uint64_t>(r.value());
}

}  // namespace catena::broker
