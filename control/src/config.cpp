#include <fmt/format.h>

#include <catena/control/address.hpp>
#include <catena/control/config.hpp>
#include <catena/control/tenants.hpp>
#include <catena/control/toml_config.hpp>
#include <catena/control/zk_metadata_store.hpp>

namespace catena::control {
namespace {

// Every key, once: its TOML name, its field and its type. Ranges and
// relations between keys are checked by validate(), which also sees flags.
const TomlSchema<ControllerConfig>& schema() {
  static const TomlSchema<ControllerConfig> s = [] {
    using C = ControllerConfig;
    TomlSchema<C> k;
    k.text("listen", &C::listen)
        .text("data_dir", &C::data_dir)
        .text("metadata", &C::metadata)
        .integer("heartbeat_interval_ms", &C::heartbeat_interval_ms)
        .integer("heartbeat_timeout_ms", &C::heartbeat_timeout_ms)
        .integer("probe_timeout_ms", &C::probe_timeout_ms)
        .integer("probe_attempts", &C::probe_attempts)
        .integer("lease_ms", &C::lease_ms)
        .integer("isolation_percent", &C::isolation_percent)
        .integer("broker_connect_timeout_ms", &C::broker_connect_timeout_ms)
        .integer("broker_rpc_timeout_ms", &C::broker_rpc_timeout_ms)
        .integer("broker_rpc_threads", &C::broker_rpc_threads)
        .integer("push_retry_initial_ms", &C::push_retry_initial_ms)
        .integer("push_retry_max_ms", &C::push_retry_max_ms)
        .integer("tick_interval_ms", &C::tick_interval_ms)
        .integer("role_balance_interval_ms", &C::role_balance_interval_ms)
        .integer("idle_timeout_ms", &C::idle_timeout_ms)
        .integer("max_connections", &C::max_connections)
        .integer("snapshot_every_records", &C::snapshot_every_records)
        .integer("group_session_timeout_ms", &C::group_session_timeout_ms)
        .integer("group_heartbeat_interval_ms", &C::group_heartbeat_interval_ms)
        .integer("zk_session_timeout_ms", &C::zk_session_timeout_ms)
        .integer("replacement_delay_ms", &C::replacement_delay_ms)
        .integer("link_fault_timeout_ms", &C::link_fault_timeout_ms)
        .text("log_level", &C::log_level, log_level_rule())
        .text("admin_token_file", &C::admin_token_file)
        .text("metrics_addr", &C::metrics_addr);
    return k;
  }();
  return s;
}

}  // namespace

Result<void> apply_toml(std::string_view text, std::string_view source, ControllerConfig& config) {
  return schema().apply(text, source, config);
}

Result<void> apply_toml_file(const std::filesystem::path& path, ControllerConfig& config) {
  return schema().apply_file(path, config);
}

Result<void> ControllerConfig::validate() const {
  if (auto r = parse_host_port(listen, /*allow_port_zero=*/true); !r) {
    return invalid_argument(fmt::format("listen: {}", r.error().message));
  }
  if (data_dir.empty()) return invalid_argument("data_dir must not be empty");
  if (!metrics_addr.empty()) {
    if (auto r = parse_host_port(metrics_addr, /*allow_port_zero=*/true); !r) {
      return invalid_argument(fmt::format("metrics_addr: {}", r.error().message));
    }
  }
  if (!metadata.empty()) {
    if (auto r = parse_zk_location(metadata); !r) return invalid_argument(r.error().message);
  }
  const std::pair<const char*, std::int64_t> positive[] = {
      {"heartbeat_interval_ms", heartbeat_interval_ms},
      {"heartbeat_timeout_ms", heartbeat_timeout_ms},
      {"probe_timeout_ms", probe_timeout_ms},
      {"probe_attempts", probe_attempts},
      {"broker_connect_timeout_ms", broker_connect_timeout_ms},
      {"broker_rpc_timeout_ms", broker_rpc_timeout_ms},
      {"push_retry_initial_ms", push_retry_initial_ms},
      {"push_retry_max_ms", push_retry_max_ms},
      {"tick_interval_ms", tick_interval_ms},
      {"idle_timeout_ms", idle_timeout_ms},
      {"max_connections", max_connections},
      {"snapshot_every_records", snapshot_every_records},
      {"group_session_timeout_ms", group_session_timeout_ms},
      {"group_heartbeat_interval_ms", group_heartbeat_interval_ms},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0 || value > std::int64_t{1} << 31) {
      return invalid_argument(fmt::format("{} must be in 1..2^31, got {}", name, value));
    }
  }
  if (role_balance_interval_ms < 0 || role_balance_interval_ms > std::int64_t{1} << 31) {
    return invalid_argument(fmt::format("role_balance_interval_ms must be in 0..2^31 (0: never), got {}",
                                        role_balance_interval_ms));
  }
  if (heartbeat_timeout_ms <= heartbeat_interval_ms) {
    return invalid_argument(fmt::format("heartbeat_timeout_ms ({}) must exceed heartbeat_interval_ms ({})",
                                        heartbeat_timeout_ms, heartbeat_interval_ms));
  }
  if (lease_ms != 0 && (lease_ms <= heartbeat_interval_ms || lease_ms >= heartbeat_timeout_ms)) {
    return invalid_argument(fmt::format(
        "lease_ms ({}) must lie between heartbeat_interval_ms ({}) and heartbeat_timeout_ms ({}), or be 0",
        lease_ms, heartbeat_interval_ms, heartbeat_timeout_ms));
  }
  if (heartbeat_timeout_ms / 2 <= heartbeat_interval_ms && lease_ms == 0) {
    return invalid_argument(
        fmt::format("lease_ms 0 means heartbeat_timeout_ms / 2 ({}), which must exceed "
                    "heartbeat_interval_ms ({}): set lease_ms or a longer timeout",
                    heartbeat_timeout_ms / 2, heartbeat_interval_ms));
  }
  if (isolation_percent < 1 || isolation_percent > 100) {
    return invalid_argument(fmt::format("isolation_percent must be in 1..100, got {}", isolation_percent));
  }
  if (group_session_timeout_ms <= group_heartbeat_interval_ms) {
    return invalid_argument(
        fmt::format("group_session_timeout_ms ({}) must exceed group_heartbeat_interval_ms ({})",
                    group_session_timeout_ms, group_heartbeat_interval_ms));
  }
  if (zk_session_timeout_ms < 1000 || zk_session_timeout_ms > 120000) {
    return invalid_argument(
        fmt::format("zk_session_timeout_ms must be in 1000..120000, got {}", zk_session_timeout_ms));
  }
  if (replacement_delay_ms < 0 || replacement_delay_ms > std::int64_t{1} << 31) {
    return invalid_argument(
        fmt::format("replacement_delay_ms must be in 0..2^31, got {}", replacement_delay_ms));
  }
  if (link_fault_timeout_ms < 3000 || link_fault_timeout_ms > std::int64_t{1} << 31) {
    return invalid_argument(fmt::format(
        "link_fault_timeout_ms must be in 3000..2^31 (brokers report a broken link every second), got {}",
        link_fault_timeout_ms));
  }
  if (broker_rpc_threads < 1 || broker_rpc_threads > 1024) {
    return invalid_argument(fmt::format("broker_rpc_threads must be in 1..1024, got {}", broker_rpc_threads));
  }
  if (push_retry_max_ms < push_retry_initial_ms) {
    return invalid_argument("push_retry_max_ms must be >= push_retry_initial_ms");
  }
  if (!admin_token_file.empty()) {
    if (auto r = read_token_file(admin_token_file); !r) return invalid_argument(r.error().message);
  }
  if (auto r = schema().check(*this); !r) return r;
  return {};
}

std::string ControllerConfig::to_toml() const {
  return schema().to_toml(*this);
}

Controller::Options ControllerConfig::controller_options() const {
  Controller::Options o;
  o.data_dir = data_dir;
  o.metadata = metadata;
  o.heartbeat_interval = std::chrono::milliseconds(heartbeat_interval_ms);
  o.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
  o.probe_attempts = static_cast<int>(probe_attempts);
  o.lease = std::chrono::milliseconds(lease_ms);
  o.isolation_percent = static_cast<int>(isolation_percent);
  o.push_retry_initial = std::chrono::milliseconds(push_retry_initial_ms);
  o.push_retry_max = std::chrono::milliseconds(push_retry_max_ms);
  o.snapshot_every_records = static_cast<std::uint64_t>(snapshot_every_records);
  o.group_session_timeout = std::chrono::milliseconds(group_session_timeout_ms);
  o.group_heartbeat_interval = std::chrono::milliseconds(group_heartbeat_interval_ms);
  o.replacement_delay = std::chrono::milliseconds(replacement_delay_ms);
  o.link_fault_timeout = std::chrono::milliseconds(link_fault_timeout_ms);
  o.zk_session_timeout = std::chrono::milliseconds(zk_session_timeout_ms);
  o.broker_rpc_threads = static_cast<int>(broker_rpc_threads);
  return o;
}

ThriftBrokerAdmin::Options ControllerConfig::broker_admin_options() const {
  ThriftBrokerAdmin::Options o;
  o.connect_timeout = std::chrono::milliseconds(broker_connect_timeout_ms);
  o.rpc_timeout = std::chrono::milliseconds(broker_rpc_timeout_ms);
  o.probe_timeout = std::chrono::milliseconds(probe_timeout_ms);
  return o;
}

ControllerServer::Options ControllerConfig::server_options() const {
  ControllerServer::Options o;
  auto hp = parse_host_port(listen, /*allow_port_zero=*/true);
  if (hp) {
    o.thrift.host = hp->host;
    o.thrift.port = hp->port;
  }
  o.thrift.idle_timeout = std::chrono::milliseconds(idle_timeout_ms);
  o.thrift.max_connections = max_connections;
  o.tick_interval = std::chrono::milliseconds(tick_interval_ms);
  o.role_balance_interval = std::chrono::milliseconds(role_balance_interval_ms);
  if (!admin_token_file.empty()) {
    auto token = read_token_file(admin_token_file);
    // validate() read it; should it fail now, no one gets in rather than everyone.
    if (token)
      o.admin_token = std::move(*token);
    else
      o.admin_token = new_token().value_or(std::string(64, 'x')) + "-unreadable";
  }
  return o;
}

}  // namespace catena::control
