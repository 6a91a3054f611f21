// Controller: tenants (catena.thrift "Tenants", tenants.hpp). Who may make
// which call is decided by the Thrift handler (controller_server.cpp); the
// controller keeps the tenants durably and enforces their quotas, under its
// lock and before any record is written, so a refused call changes nothing.
#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <set>
#include <spdlog/spdlog.h>

#include <catena/chain/limits.hpp>
#include <catena/control/controller.hpp>
#include <catena/control/tenants.hpp>

namespace catena::control {
namespace {

ControlError no_tenant(const std::string& name) {
  return invalid_argument(fmt::format("no tenant '{}'", name));
}

// The partitions a channel holds for its quota: an alter under way counts
// at the larger of its two sizes.
std::int64_t partitions_held(const meta::ChannelRecord& ch) {
  std::int64_t n = ch.config.partitions;
  if (!ch.generations.empty() && !ch.generations.back().complete) {
    n = std::max<std::int64_t>(n, ch.generations.back().partitions);
  }
  return n;
}

constexpr std::size_t kMaxTenantZones = 64;
constexpr std::size_t kMaxZoneLength = 64;

Result<void> check_quotas(const idl::TenantQuotas& q) {
  if (q.max_channels < -1 || q.max_partitions < -1 || q.max_groups < -1 || q.max_segment_bytes < -1) {
    return invalid_argument(fmt::format(
        "quotas must be >= 0, or -1 for unlimited: max_channels {}, max_partitions {}, max_groups {}, "
        "max_segment_bytes {}",
        q.max_channels, q.max_partitions, q.max_groups, q.max_segment_bytes));
  }
  if (q.max_sessions < -1) {
    return invalid_argument(fmt::format(
        "max_sessions must be >= 0 (0: no client session), or -1 for unlimited, got {}", q.max_sessions));
  }
  if (q.max_producer_ids_per_minute < -1) {
    return invalid_argument(
        fmt::format("max_producer_ids_per_minute must be >= 0 (0: no publisher), or -1 for unlimited, got {}",
                    q.max_producer_ids_per_minute));
  }
  if (q.max_publisher_ring_bytes < -1) {
    return invalid_argument(fmt::format(
        "max_publisher_ring_bytes must be >= 0 (0: nobody may publish), or -1 for unlimited, got {}",
        q.max_publisher_ring_bytes));
  }
  if (q.max_publish_bytes_per_sec != -1 &&
      (q.max_publish_bytes_per_sec < chain::limits::kMinPublishBytesPerSec ||
       q.max_publish_bytes_per_sec > chain::limits::kMaxPublishBytesPerSec)) {
    return invalid_argument(
        fmt::format("max_publish_bytes_per_sec must be {}..{} bytes per second per node, or -1 for "
                    "unlimited, got {}",
                    chain::limits::kMinPublishBytesPerSec, chain::limits::kMaxPublishBytesPerSec,
                    q.max_publish_bytes_per_sec));
  }
  if (q.zones.size() > kMaxTenantZones) {
    return invalid_argument(fmt::format("at most {} zones, got {}", kMaxTenantZones, q.zones.size()));
  }
  std::set<std::string> seen;
  for (const auto& z : q.zones) {
    if (z.empty() || z.size() > kMaxZoneLength) {
      return invalid_argument(fmt::format("a zone is 1..{} characters, got '{}'", kMaxZoneLength, z));
    }
    if (!seen.insert(z).second) return invalid_argument(fmt::format("zone '{}' is named twice", z));
  }
  return {};
}

}  // namespace

Controller::TenantUse Controller::tenant_use_locked(const std::string& tenant) const {
  TenantUse use;
  const auto& state = store_->state();
  for (const auto& [name, ch] : state.channels) {
    if (!in_namespace(tenant, name)) continue;
    ++use.channels;
    use.partitions += partitions_held(ch);
    use.segment_bytes += partitions_held(ch) * ch.config.replication * ch.config.segment_bytes;
  }
  std::set<std::string> groups;
  for (const auto& [name, g] : groups_.groups()) {
    if (in_namespace(tenant, name)) groups.insert(name);
  }
  for (const auto& [name, offsets] : state.group_offsets) {
    if (in_namespace(tenant, name)) groups.insert(name);
  }
  for (const auto& [key, offset] : queued_offsets_) {  // a first commit not sent yet
    if (in_namespace(tenant, std::get<0>(key))) groups.insert(std::get<0>(key));
  }
  use.groups = static_cast<std::int64_t>(groups.size());
  return use;
}

bool Controller::group_known_locked(const std::string& group) const {
  return groups_.find(group) != nullptr || store_->state().group_offsets.count(group) != 0 ||
         std::any_of(queued_offsets_.begin(), queued_offsets_.end(),
                     [&](const auto& q) { return std::get<0>(q.first) == group; });
}

Result<void> Controller::check_quota_locked(const std::string& name, std::int64_t add_channels,
                                            std::int64_t add_partitions, std::int64_t add_groups,
                                            std::int64_t add_segment_bytes) const {
  const std::string tenant(namespace_of(name));
  if (tenant.empty()) return {};
  const auto& tenants = store_->state().tenants;
  const auto it = tenants.find(tenant);
  if (it == tenants.end()) return {};
  const auto& q = it->second.quotas;
  const TenantUse use = tenant_use_locked(tenant);
  const auto over = [&](const char* quota, std::int64_t limit, std::int64_t now,
                        std::int64_t add) -> Result<void> {
    if (add <= 0 || limit < 0 || now + add <= limit) return {};
    return make_error(idl::ErrorCode::RESOURCE_EXHAUSTED,
                      fmt::format("tenant '{}' quota {} is {}: {} in use, this call needs {} more", tenant,
                                  quota, limit, now, add));
  };
  if (auto r = over("max_channels", q.max_channels, use.channels, add_channels); !r) return r;
  if (auto r = over("max_partitions", q.max_partitions, use.partitions, add_partitions); !r) return r;
  if (auto r = over("max_segment_bytes", q.max_segment_bytes, use.segment_bytes, add_segment_bytes); !r)
    return r;
  return over("max_groups", q.max_groups, use.groups, add_groups);
}

Result<void> Controller::take_producer_id_locked(const std::string& tenant) {
  if (tenant.empty()) return {};
  const auto& tenants = store_->state().tenants;
  const auto t = tenants.find(tenant);
  if (t == tenants.end()) return {};
  const std::int64_t limit = t->second.quotas.max_producer_ids_per_minute;
  if (limit < 0) {
    producer_id_buckets_.erase(tenant);
    return {};
  }
  constexpr double kMsPerMinute = 60'000.0;
  const auto now = clock_.now();
  const auto capacity = static_cast<double>(limit);
  auto [it, fresh] = producer_id_buckets_.try_emplace(tenant, ProducerIdBucket{capacity, now});
  auto& bucket = it->second;
  if (!fresh) {
    const double elapsed_ms = std::chrono::duration<double, std::milli>(now - bucket.refilled).count();
    bucket.tokens = std::min(capacity, bucket.tokens + elapsed_ms * capacity / kMsPerMinute);
    bucket.refilled = now;
  }
  if (bucket.tokens >= 1.0) {
    bucket.tokens -= 1.0;
    return {};
  }
  if (limit == 0) {
    return make_error(
        idl::ErrorCode::RESOURCE_EXHAUSTED,
        fmt::format("tenant '{}' quota max_producer_ids_per_minute is 0: it may not publish", tenant));
  }
  const auto wait_ms = static_cast<std::int64_t>((1.0 - bucket.tokens) * kMsPerMinute / capacity) + 1;
  return make_error(idl::ErrorCode::RESOURCE_EXHAUSTED,
                    fmt::format("tenant '{}' quota max_producer_ids_per_minute is {}: none left, the next "
                                "one in {} ms",
                                tenant, limit, wait_ms));
}

bool Controller::placement_allowed_locked(const std::string& channel, const std::string& node_id) const {
  const std::string tenant(namespace_of(channel));
  if (tenant.empty()) return true;
  const auto& tenants = store_->state().tenants;
  const auto t = tenants.find(tenant);
  if (t == tenants.end() || t->second.quotas.zones.empty()) return true;
  const auto* node = node_locked(node_id);
  if (node == nullptr) return false;
  const auto& zones = t->second.quotas.zones;
  return std::find(zones.begin(), zones.end(), node->info.zone) != zones.end();
}

std::vector<PlacementCandidate> Controller::candidates_for_locked(const std::string& channel) const {
  std::vector<PlacementCandidate> out;
  for (auto& c : candidates_locked()) {
    if (placement_allowed_locked(channel, c.node_id)) out.push_back(std::move(c));
  }
  return out;
}

std::set<std::string> Controller::placement_refused_locked(const std::string& channel) const {
  std::set<std::string> out;
  // Per route under repair: the nodes alone, not candidates_locked()'s load
  // (which walks every route).
  for (const auto& [id, node] : store_->state().nodes) {
    if (!placement_allowed_locked(channel, id)) out.insert(id);
  }
  return out;
}

Result<std::string> Controller::create_tenant(const std::string& name, const idl::TenantQuotas& quotas) {
  if (auto r = validate_tenant_name(name); !r) return r.error();
  if (auto r = check_quotas(quotas); !r) return r.error();
  auto token = new_token();
  if (!token) return make_error(idl::ErrorCode::INTERNAL, "no random bytes for the tenant's token");
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  if (store_->state().tenants.count(name) != 0) {
    return make_error(idl::ErrorCode::CHANNEL_EXISTS, fmt::format("tenant '{}' already exists", name));
  }
  meta::TenantRecord t;
  t.__set_name(name);
  t.__set_quotas(quotas);
  t.__set_token_sha256(token_sha256(*token));
  t.__set_created_at_ms(wall_ms());
  meta::MetaRecord record;
  record.__set_put_tenant(t);
  if (auto r = store_->commit(record); !r) return r.error();
  spdlog::info("tenant '{}' created (max_channels {}, max_partitions {}, max_groups {}, zones [{}])", name,
               quotas.max_channels, quotas.max_partitions, quotas.max_groups,
               quotas.zones.empty() ? std::string("any") : fmt::format("{}", fmt::join(quotas.zones, ",")));
  return std::move(*token);
}

Result<std::vector<idl::TenantInfo>> Controller::list_tenants() const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  std::vector<idl::TenantInfo> out;
  for (const auto& [name, t] : store_->state().tenants) {
    const TenantUse use = tenant_use_locked(name);
    idl::TenantInfo info;
    info.__set_name(name);
    info.__set_quotas(t.quotas);
    info.__set_channels(use.channels);
    info.__set_partitions(use.partitions);
    info.__set_groups(use.groups);
    info.__set_segment_bytes(use.segment_bytes);
    info.__set_created_at_ms(t.created_at_ms);
    out.push_back(std::move(info));
  }
  return out;
}

Result<void> Controller::delete_tenant(const std::string& name) {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  if (store_->state().tenants.count(name) == 0) return no_tenant(name);
  const TenantUse use = tenant_use_locked(name);
  if (use.channels > 0) {
    return invalid_argument(
        fmt::format("tenant '{}' still owns {} channel(s): a tenant is deleted only while its namespace "
                    "holds none",
                    name, use.channels));
  }
  meta::MetaRecord record;
  record.__set_delete_tenant(name);
  if (auto r = store_->commit(record); !r) return r.error();
  producer_id_buckets_.erase(name);
  spdlog::info("tenant '{}' deleted", name);
  return {};
}

Result<std::string> Controller::rotate_tenant_token(const std::string& name) {
  auto token = new_token();
  if (!token) return make_error(idl::ErrorCode::INTERNAL, "no random bytes for the tenant's token");
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto it = store_->state().tenants.find(name);
  if (it == store_->state().tenants.end()) return no_tenant(name);
  meta::TenantRecord t = it->second;
  t.__set_token_sha256(token_sha256(*token));
  t.__set_access_generation(t.access_generation + 1);
  meta::MetaRecord record;
  record.__set_put_tenant(t);
  if (auto r = store_->commit(record); !r) return r.error();
  // Every node holding anything of the tenant's partitions is sent the new
  // access secret, at the route's epoch (a push not confirmed is retried):
  // its replicas close the client sessions opened with the old one.
  const std::size_t partitions = push_tenant_again_locked(name);
  spdlog::info(
      "tenant '{}': new token issued, the old one no longer works; new access secrets go to its {} "
      "partition(s)",
      name, partitions);
  return std::move(*token);
}

std::size_t Controller::push_tenant_again_locked(const std::string& tenant) {
  std::size_t partitions = 0;
  for (const auto& [channel, ch] : store_->state().channels) {
    if (!in_namespace(tenant, channel)) continue;
    for (const auto& route : ch.routes) {
      acks_.erase(RouteId{route.channel, route.partition});
      ++partitions;
    }
  }
  return partitions;
}

std::optional<idl::TenantNodeLimits> Controller::tenant_limits_locked(const std::string& channel) const {
  const auto& tenants = store_->state().tenants;
  const auto t = tenants.find(std::string(namespace_of(channel)));
  if (t == tenants.end()) return std::nullopt;
  idl::TenantNodeLimits out;
  out.__set_tenant(t->first);
  out.__set_publisher_ring_bytes(t->second.quotas.max_publisher_ring_bytes);
  out.__set_publish_bytes_per_sec(t->second.quotas.max_publish_bytes_per_sec);
  out.__set_sessions(t->second.quotas.max_sessions);
  return out;
}

Result<void> Controller::alter_tenant(const std::string& name, const idl::TenantQuotas& quotas) {
  if (auto r = check_quotas(quotas); !r) return r.error();
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto it = store_->state().tenants.find(name);
  if (it == store_->state().tenants.end()) return no_tenant(name);
  meta::TenantRecord t = it->second;
  t.__set_quotas(quotas);
  meta::MetaRecord record;
  record.__set_put_tenant(t);
  if (auto r = store_->commit(record); !r) return r.error();
  (void)push_tenant_again_locked(name);  // its per-node limits, to every node holding its partitions
  // A new producer-id limit starts with a full minute's worth.
  producer_id_buckets_.erase(name);
  const TenantUse use = tenant_use_locked(name);
  spdlog::info(
      "tenant '{}': quotas now channels {}, partitions {}, groups {}, segment bytes {}, zones [{}], "
      "producer ids {}/min, per node: publisher rings {} bytes, publish {} bytes/s, {} sessions (in use: "
      "{}, {}, {}, {})",
      name, quotas.max_channels, quotas.max_partitions, quotas.max_groups, quotas.max_segment_bytes,
      fmt::join(quotas.zones, ", "), quotas.max_producer_ids_per_minute, quotas.max_publisher_ring_bytes,
      quotas.max_publish_bytes_per_sec, quotas.max_sessions, use.channels, use.partitions, use.groups,
      use.segment_bytes);
  return {};
}

Result<std::string> Controller::tenant_of_token(const std::string& sha) const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  for (const auto& [name, t] : store_->state().tenants) {
    if (same_secret(t.token_sha256, sha)) return name;
  }
  return make_error(idl::ErrorCode::UNAUTHENTICATED, "the token is neither the admin's nor a tenant's");
}

Result<void> Controller::check_tenant(const std::string& tenant, const std::string& sha) const {
  MutexLock lock(mu_);
  if (auto r = check_running_locked(); !r) return r.error();
  const auto it = store_->state().tenants.find(tenant);
  if (it == store_->state().tenants.end() || !same_secret(it->second.token_sha256, sha)) {
    return make_error(idl::ErrorCode::UNAUTHENTICATED,
                      fmt::format("the token this connection authenticated with no longer belongs to tenant "
                                  "'{}' (deleted, or given a new token): authenticate again",
                                  tenant));
  }
  return {};
}

}  // namespace catena::control
