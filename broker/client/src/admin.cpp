// catena::Admin over the controller's Thrift client: the SDK's types in,
// idl types out of sight, controller errors as client errors.
#include <algorithm>
#include <utility>

#include <catena/broker/controller_routes.hpp>
#include <catena/client/admin.hpp>
#include <catena/control/controller_client.hpp>

#include "controller_options.hpp"

namespace catena {

namespace idl = control::idl;

namespace {

ChannelInfo info_of(const idl::ChannelInfo& info) {
  ChannelInfo out;
  out.settings.name = info.config.name;
  out.settings.partitions = info.config.partitions;
  out.settings.replication = info.config.replication;
  out.settings.segment_bytes = info.config.segment_bytes;
  out.settings.ttl_ms = info.config.ttl_ms;
  out.partitions.reserve(info.routes.size());
  for (const auto& r : info.routes) {
    PartitionChain p;
    p.partition = static_cast<std::uint32_t>(r.partition);
    p.epoch = static_cast<std::uint64_t>(r.epoch);
    p.start_offset = static_cast<std::uint64_t>(r.start_offset);
    for (const auto& rep : r.replicas) p.chain.push_back(rep.node_id);
    out.partitions.push_back(std::move(p));
  }
  out.altering = !info.generations.empty() && !info.generations.back().complete;
  return out;
}

idl::TenantQuotas to_idl(const TenantQuotas& q) {
  idl::TenantQuotas out;
  out.__set_max_channels(q.max_channels);
  out.__set_max_partitions(q.max_partitions);
  out.__set_max_groups(q.max_groups);
  out.__set_zones(q.zones);
  out.__set_max_segment_bytes(q.max_segment_bytes);
  out.__set_max_publisher_ring_bytes(q.max_publisher_ring_bytes);
  out.__set_max_publish_bytes_per_sec(q.max_publish_bytes_per_sec);
  out.__set_max_sessions(q.max_sessions);
  out.__set_max_producer_ids_per_minute(q.max_producer_ids_per_minute);
  return out;
}

TenantInfo tenant_of(const idl::TenantInfo& t) {
  TenantInfo out;
  out.name = t.name;
  out.quotas.max_channels = t.quotas.max_channels;
  out.quotas.max_partitions = t.quotas.max_partitions;
  out.quotas.max_groups = t.quotas.max_groups;
  out.quotas.zones = t.quotas.zones;
  out.quotas.max_segment_bytes = t.quotas.max_segment_bytes;
  out.quotas.max_publisher_ring_bytes = t.quotas.max_publisher_ring_bytes;
  out.quotas.max_publish_bytes_per_sec = t.quotas.max_publish_bytes_per_sec;
  out.quotas.max_sessions = t.quotas.max_sessions;
  out.quotas.max_producer_ids_per_minute = t.quotas.max_producer_ids_per_minute;
  out.channels = t.channels;
  out.partitions = t.partitions;
  out.groups = t.groups;
  out.segment_bytes = t.segment_bytes;
  out.created_at_ms = t.created_at_ms;
  return out;
}

}  // namespace

struct CATENA_LOCAL Admin::Impl {
  control::ControllerClient::Options options;
  control::ControllerClient client;
  explicit Impl(control::ControllerClient::Options o) : options(o), client(std::move(o)) {}
};

Admin::Admin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Admin::~Admin() = default;

client::Result<std::unique_ptr<Admin>> Admin::connect(const std::string& controllers,
                                                      const ConnectOptions& options) {
  auto o = client_detail::controller_options(controllers, options, "admin");
  if (!o) return o.error();
  return std::unique_ptr<Admin>(new Admin(std::make_unique<Impl>(std::move(o.value()))));
}

client::Result<ChannelInfo> Admin::create_channel(const ChannelSettings& s) {
  idl::ChannelConfig cfg;
  cfg.name = s.name;
  cfg.partitions = s.partitions;
  cfg.replication = s.replication;
  cfg.segment_bytes = s.segment_bytes;
  cfg.ttl_ms = s.ttl_ms;
  auto r = impl_->client.create_channel(cfg);
  if (!r) return broker::to_client_error(r.error());
  return info_of(r.value());
}

client::Result<ChannelInfo> Admin::describe_channel(const std::string& name) {
  auto r = impl_->client.describe_channel(name);
  if (!r) return broker::to_client_error(r.error());
  return info_of(r.value());
}

client::Result<std::vector<ChannelInfo>> Admin::list_channels() {
  auto r = impl_->client.list_channels();
  if (!r) return broker::to_client_error(r.error());
  std::vector<ChannelInfo> out;
  out.reserve(r.value().size());
  for (const auto& ch : r.value()) out.push_back(info_of(ch));
  return out;
}

client::Result<ChannelInfo> Admin::alter_partitions(const std::string& name, std::int32_t partitions) {
  // The controller answers once every marker committed: a connection of
  // its own, with room for that.
  control::ControllerClient::Options o = impl_->options;
  o.rpc_timeout = std::max(o.rpc_timeout, std::chrono::milliseconds(30000));
  control::ControllerClient slow(std::move(o));
  auto r = slow.alter_channel(name, partitions);
  if (!r) return broker::to_client_error(r.error());
  return info_of(r.value());
}

client::Result<ChannelInfo> Admin::alter_retention(const std::string& name, std::int64_t ttl_ms) {
  auto r = impl_->client.alter_retention(name, ttl_ms);
  if (!r) return broker::to_client_error(r.error());
  return info_of(r.value());
}

client::Result<void> Admin::delete_channel(const std::string& name) {
  auto r = impl_->client.delete_channel(name);
  if (!r) return broker::to_client_error(r.error());
  return {};
}

client::Result<std::string> Admin::create_tenant(const std::string& name, const TenantQuotas& quotas) {
  auto r = impl_->client.create_tenant(name, to_idl(quotas));
  if (!r) return broker::to_client_error(r.error());
  return std::move(r.value());
}

client::Result<std::vector<TenantInfo>> Admin::list_tenants() {
  auto r = impl_->client.list_tenants();
  if (!r) return broker::to_client_error(r.error());
  std::vector<TenantInfo> out;
  out.reserve(r.value().size());
  for (const auto& t : r.value()) out.push_back(tenant_of(t));
  return out;
}

client::Result<void> Admin::alter_tenant(const std::string& name, const TenantQuotas& quotas) {
  auto r = impl_->client.alter_tenant(name, to_idl(quotas));
  if (!r) return broker::to_client_error(r.error());
  return {};
}

client::Result<std::string> Admin::rotate_tenant_token(const std::string& name) {
  auto r = impl_->client.rotate_tenant_token(name);
  if (!r) return broker::to_client_error(r.error());
  return std::move(r.value());
}

client::Result<void> Admin::delete_tenant(const std::string& name) {
  auto r = impl_->client.delete_tenant(name);
  if (!r) return broker::to_client_error(r.error());
  return {};
}

}  // namespace catena
