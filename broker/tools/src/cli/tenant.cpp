// `catena tenant create|list|alter|delete|rotate-token`: the admin's tenant calls
// (README "Tenants"). Run with the admin token (--token or $CATENA_TOKEN).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include <catena/control/controller_client.hpp>

#include "commands.hpp"
#include "output.hpp"

namespace catena::cli {
namespace {

std::string limit(std::int64_t v) {
  return v < 0 ? "-" : std::to_string(v);
}

// 64MiB, 512KiB, 1000: a size as the flags take it; "-" for unlimited.
std::string size_limit(std::int64_t v) {
  if (v < 0) return "-";
  if (v != 0 && v % (1 << 20) == 0) return std::to_string(v >> 20) + "MiB";
  if (v != 0 && v % (1 << 10) == 0) return std::to_string(v >> 10) + "KiB";
  return std::to_string(v);
}

// The quota flags of `tenant create` and `tenant alter`.
void add_quota_options(CLI::App* cmd, TenantCommands& c) {
  cmd->add_option("--max-channels", c.max_channels, "channels in its namespace (-1: unlimited)")
      ->capture_default_str();
  cmd->add_option("--max-partitions", c.max_partitions, "partitions over its channels (-1: unlimited)")
      ->capture_default_str();
  cmd->add_option("--max-groups", c.max_groups, "subscriber groups in its namespace (-1: unlimited)")
      ->capture_default_str();
  cmd->add_option("--max-segment-bytes", c.max_segment_bytes,
                  "registered memory per segment slot: replication x segment size summed over its partitions "
                  "(nodes keep --segment-slots slots per replica; 4GiB, 512MiB...; -1: unlimited)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--max-publisher-ring-bytes", c.max_publisher_ring_bytes,
                  "per node: publisher staging rings its sessions may pin there at once (64MiB...; "
                  "beyond it a publisher is refused resource_exhausted; -1: unlimited)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--max-publish-rate", c.max_publish_rate,
                  "per node: bytes per second its publishers may append there (10MiB...; the excess waits "
                  "in their rings: back-pressure for this tenant only; -1: unlimited)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_option("--max-sessions", c.max_sessions,
                  "per node: client sessions (publishers, subscribers, commit watches) its clients may hold "
                  "there at once (-1: unlimited)")
      ->capture_default_str();
  cmd->add_option("--max-producer-ids-per-minute", c.max_producer_ids_per_minute,
                  "producer ids (initProducer calls: one per publisher created) its clients may take per "
                  "minute, cluster-wide (0: no publisher; -1: unlimited)")
      ->capture_default_str();
  cmd->add_option("--zones", c.zones,
                  "zones its data may be placed in, through every repair (zone-a,zone-b; default: any)")
      ->delimiter(',');
}

// The controller answers INVALID_ARGUMENT for a tenant it does not know:
// not found when the tenant list confirms it.
int tenant_failure(control::ControllerClient& client, const std::string& what, const std::string& name,
                   const control::ControlError& e) {
  if (e.code == control::idl::ErrorCode::INVALID_ARGUMENT) {
    auto tenants = client.list_tenants();
    if (tenants && std::none_of(tenants->begin(), tenants->end(),
                                [&](const control::idl::TenantInfo& t) { return t.name == name; }))
      return fail(what + " " + name, e.describe(), kExitNotFound);
  }
  return fail(what + " " + name, e);
}

}  // namespace

TenantCommands add_tenant_commands(CLI::App& app) {
  TenantCommands c;
  auto* tenant = app.add_subcommand(
      "tenant",
      "tenants: namespaces of channels and groups (NAME.*) with their own token and quotas (admin)");
  tenant->require_subcommand(1);
  c.create = tenant->add_subcommand("create",
                                    "create a tenant; prints its token once (keep it: only its hash "
                                    "is stored)");
  c.create->add_option("name", c.name, "tenant name: [A-Za-z0-9_-], no '.'")->required();
  add_quota_options(c.create, c);
  c.alter =
      tenant->add_subcommand("alter",
                             "change a tenant's quotas: only those given (a limit below the use "
                             "refuses growth, takes nothing away; new zones apply to later placements)");
  c.alter->add_option("name", c.name, "tenant name")->required();
  add_quota_options(c.alter, c);
  c.alter->add_flag("--any-zone", c.any_zone, "its data may be placed in any zone from now on")
      ->excludes("--zones");
  c.list = tenant->add_subcommand("list", "every tenant with its quotas and current use");
  c.remove = tenant->add_subcommand("delete", "delete a tenant (refused while it owns channels)");
  c.remove->add_option("name", c.name, "tenant name")->required();
  c.rotate = tenant->add_subcommand("rotate-token", "issue a new token; the old one stops working");
  c.rotate->add_option("name", c.name, "tenant name")->required();
  return c;
}

int tenant_create(const Common& c, const TenantCommands& o) {
  control::ControllerClient client(c.client_options());
  control::idl::TenantQuotas q;
  q.__set_max_channels(o.max_channels);
  q.__set_max_partitions(o.max_partitions);
  q.__set_max_groups(o.max_groups);
  q.__set_max_segment_bytes(o.max_segment_bytes);
  q.__set_max_publisher_ring_bytes(o.max_publisher_ring_bytes);
  q.__set_max_publish_bytes_per_sec(o.max_publish_rate);
  q.__set_max_sessions(o.max_sessions);
  q.__set_max_producer_ids_per_minute(o.max_producer_ids_per_minute);
  q.__set_zones(o.zones);
  auto token = client.create_tenant(o.name, q);
  if (!token) return fail("tenant create " + o.name, token.error());
  std::fprintf(stderr, "tenant %s created; its token (shown once):\n", o.name.c_str());
  std::printf("%s\n", token->c_str());
  return 0;
}

int tenant_list(const Common& c) {
  control::ControllerClient client(c.client_options());
  auto tenants = client.list_tenants();
  if (!tenants) return fail("tenant list", tenants.error());
  if (c.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& t : *tenants) out.push_back(tenant_json(t));
    print_json({{"tenants", std::move(out)}});
    return 0;
  }
  std::printf("%-24s  %14s  %16s  %12s  %21s  %10s  %10s  %13s  %12s  %s\n", "tenant", "channels",
              "partitions", "groups", "segment MiB", "rings/node", "rate/node", "sessions/node",
              "producers/min", "zones");
  for (const auto& t : *tenants) {
    std::string zones;
    for (const auto& z : t.quotas.zones) zones += (zones.empty() ? "" : ",") + z;
    const auto mib = [](std::int64_t bytes) { return bytes < 0 ? bytes : bytes >> 20; };
    const std::string rate =
        t.quotas.max_publish_bytes_per_sec < 0 ? "-" : size_limit(t.quotas.max_publish_bytes_per_sec) + "/s";
    std::printf("%-24s  %6lld / %-5s  %7lld / %-6s  %5lld / %-4s  %9lld / %-9s  %10s  %10s  %13s  %12s  %s\n",
                t.name.c_str(), static_cast<long long>(t.channels), limit(t.quotas.max_channels).c_str(),
                static_cast<long long>(t.partitions), limit(t.quotas.max_partitions).c_str(),
                static_cast<long long>(t.groups), limit(t.quotas.max_groups).c_str(),
                static_cast<long long>(mib(t.segment_bytes)), limit(mib(t.quotas.max_segment_bytes)).c_str(),
                size_limit(t.quotas.max_publisher_ring_bytes).c_str(), rate.c_str(),
                limit(t.quotas.max_sessions).c_str(), limit(t.quotas.max_producer_ids_per_minute).c_str(),
                zones.empty() ? "any" : zones.c_str());
  }
  return 0;
}

int tenant_delete(const Common& c, const TenantCommands& o) {
  control::ControllerClient client(c.client_options());
  if (auto r = client.delete_tenant(o.name); !r)
    return tenant_failure(client, "tenant delete", o.name, r.error());
  std::printf("tenant %s deleted\n", o.name.c_str());
  return 0;
}

int tenant_alter(const Common& c, const TenantCommands& o) {
  control::ControllerClient client(c.client_options());
  auto tenants = client.list_tenants();
  if (!tenants) return fail("tenant alter " + o.name, tenants.error());
  const auto it = std::find_if(tenants->begin(), tenants->end(),
                               [&](const control::idl::TenantInfo& t) { return t.name == o.name; });
  if (it == tenants->end())
    return fail("tenant alter " + o.name, "no tenant '" + o.name + "'", kExitNotFound);
  control::idl::TenantQuotas q = it->quotas;
  const auto given = [&](const char* flag) { return o.alter->count(flag) > 0; };
  if (given("--max-channels")) q.__set_max_channels(o.max_channels);
  if (given("--max-partitions")) q.__set_max_partitions(o.max_partitions);
  if (given("--max-groups")) q.__set_max_groups(o.max_groups);
  if (given("--max-segment-bytes")) q.__set_max_segment_bytes(o.max_segment_bytes);
  if (given("--max-publisher-ring-bytes")) q.__set_max_publisher_ring_bytes(o.max_publisher_ring_bytes);
  if (given("--max-publish-rate")) q.__set_max_publish_bytes_per_sec(o.max_publish_rate);
  if (given("--max-sessions")) q.__set_max_sessions(o.max_sessions);
  if (given("--max-producer-ids-per-minute"))
    q.__set_max_producer_ids_per_minute(o.max_producer_ids_per_minute);
  if (given("--zones")) q.__set_zones(o.zones);
  if (o.any_zone) q.__set_zones({});
  if (auto r = client.alter_tenant(o.name, q); !r) return fail("tenant alter " + o.name, r.error());
  std::printf("tenant %s altered\n", o.name.c_str());
  return 0;
}

int tenant_rotate(const Common& c, const TenantCommands& o) {
  control::ControllerClient client(c.client_options());
  auto token = client.rotate_tenant_token(o.name);
  if (!token) return tenant_failure(client, "tenant rotate-token", o.name, token.error());
  std::fprintf(stderr, "tenant %s: new token (shown once; the old one no longer works):\n", o.name.c_str());
  std::printf("%s\n", token->c_str());
  return 0;
}

}  // namespace catena::cli
