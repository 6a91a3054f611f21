#include <fmt/format.h>
#include <toml++/toml.h>

#include <catena/control/address.hpp>
#include <catena/control/config.hpp>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

namespace catena::control {
namespace {

ControlError invalid(std::string message) {
  return make_error(idl::ErrorCode::INVALID_ARGUMENT, std::move(message));
}

using Setter = std::function<Result<void>(const toml::node&, ControllerConfig&)>;

Setter int_key(std::int64_t ControllerConfig::*field) {
  return [field](const toml::node& node, ControllerConfig& c) -> Result<void> {
    auto v = node.value<std::int64_t>();
    if (!node.is_integer() || !v) return invalid("expected an integer");
    c.*field = *v;
    return {};
  };
}

Setter string_key(std::string ControllerConfig::*field) {
  return [field](const toml::node& node, ControllerConfig& c) -> Result<void> {
    auto v = node.value<std::string>();
    if (!node.is_string() || !v) return invalid("expected a string");
    c.*field = *v;
    return {};
  };
}

const std::map<std::string, Setter, std::less<>>& keys() {
  static const std::map<std::string, Setter, std::less<>> k = {
      {"listen", string_key(&ControllerConfig::listen)},
      {"data_dir", string_key(&ControllerConfig::data_dir)},
      {"heartbeat_interval_ms", int_key(&ControllerConfig::heartbeat_interval_ms)},
      {"heartbeat_timeout_ms", int_key(&ControllerConfig::heartbeat_timeout_ms)},
      {"probe_timeout_ms", int_key(&ControllerConfig::probe_timeout_ms)},
      {"probe_attempts", int_key(&ControllerConfig::probe_attempts)},
      {"lease_ms", int_key(&ControllerConfig::lease_ms)},
      {"isolation_percent", int_key(&ControllerConfig::isolation_percent)},
      {"broker_connect_timeout_ms", int_key(&ControllerConfig::broker_connect_timeout_ms)},
      {"broker_rpc_timeout_ms", int_key(&ControllerConfig::broker_rpc_timeout_ms)},
      {"push_retry_initial_ms", int_key(&ControllerConfig::push_retry_initial_ms)},
      {"push_retry_max_ms", int_key(&ControllerConfig::push_retry_max_ms)},
      {"tick_interval_ms", int_key(&ControllerConfig::tick_interval_ms)},
      {"idle_timeout_ms", int_key(&ControllerConfig::idle_timeout_ms)},
      {"max_connections", int_key(&ControllerConfig::max_connections)},
      {"snapshot_every_records", int_key(&ControllerConfig::snapshot_every_records)},
      {"log_level", string_key(&ControllerConfig::log_level)},
  };
  return k;
}

}  // namespace

Result<void> apply_toml(std::string_view text, std::string_view source, ControllerConfig& config) {
  toml::table table;
  try {
    table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return invalid(
        fmt::format("{}:{}:{}: {}", source, e.source().begin.line, e.source().begin.column, e.description()));
  }
  ControllerConfig next = config;
  for (const auto& [key, node] : table) {
    auto it = keys().find(key.str());
    if (it == keys().end()) return invalid(fmt::format("{}: unknown key '{}'", source, key.str()));
    if (auto r = it->second(node, next); !r) {
      return invalid(fmt::format("{}: key '{}': {}", source, key.str(), r.error().message));
    }
  }
  config = std::move(next);
  return {};
}

Result<void> apply_toml_file(const std::filesystem::path& path, ControllerConfig& config) {
  std::ifstream in(path);
  if (!in) return invalid(fmt::format("cannot read config file {}", path.string()));
  std::stringstream buf;
  buf << in.rdbuf();
  return apply_toml(buf.str(), path.string(), config);
}

Result<void> ControllerConfig::validate() const {
  if (auto r = parse_host_port(listen, /*allow_port_zero=*/true); !r) {
    return invalid(fmt::format("listen: {}", r.error().message));
  }
  if (data_dir.empty()) return invalid("data_dir must not be empty");
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
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0 || value > std::int64_t{1} << 31) {
      return invalid(fmt::format("{} must be in 1..2^31, got {}", name, value));
    }
  }
  if (heartbeat_timeout_ms <= heartbeat_interval_ms) {
    return invalid(fmt::format("heartbeat_timeout_ms ({}) must exceed heartbeat_interval_ms ({})",
                               heartbeat_timeout_ms, heartbeat_interval_ms));
  }
  if (lease_ms != 0 && (lease_ms <= heartbeat_interval_ms || lease_ms >= heartbeat_timeout_ms)) {
    return invalid(fmt::format(
        "lease_ms ({}) must lie between heartbeat_interval_ms ({}) and heartbeat_timeout_ms ({}), or be 0",
        lease_ms, heartbeat_interval_ms, heartbeat_timeout_ms));
  }
  if (heartbeat_timeout_ms / 2 <= heartbeat_interval_ms && lease_ms == 0) {
    return invalid(
        fmt::format("lease_ms 0 means heartbeat_timeout_ms / 2 ({}), which must exceed "
                    "heartbeat_interval_ms ({}): set lease_ms or a longer timeout",
                    heartbeat_timeout_ms / 2, heartbeat_interval_ms));
  }
  if (isolation_percent < 1 || isolation_percent > 100) {
    return invalid(fmt::format("isolation_percent must be in 1..100, got {}", isolation_percent));
  }
  if (push_retry_max_ms < push_retry_initial_ms) {
    return invalid("push_retry_max_ms must be >= push_retry_initial_ms");
  }
  static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                 "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), log_level) == std::end(kLevels)) {
    return invalid(fmt::format("log_level '{}' is not one of trace, debug, info, warn, error, critical, off",
                               log_level));
  }
  return {};
}

std::string ControllerConfig::to_toml() const {
  toml::table t{
      {"listen", listen},
      {"data_dir", data_dir},
      {"heartbeat_interval_ms", heartbeat_interval_ms},
      {"heartbeat_timeout_ms", heartbeat_timeout_ms},
      {"probe_timeout_ms", probe_timeout_ms},
      {"probe_attempts", probe_attempts},
      {"lease_ms", lease_ms},
      {"isolation_percent", isolation_percent},
      {"broker_connect_timeout_ms", broker_connect_timeout_ms},
      {"broker_rpc_timeout_ms", broker_rpc_timeout_ms},
      {"push_retry_initial_ms", push_retry_initial_ms},
      {"push_retry_max_ms", push_retry_max_ms},
      {"tick_interval_ms", tick_interval_ms},
      {"idle_timeout_ms", idle_timeout_ms},
      {"max_connections", max_connections},
      {"snapshot_every_records", snapshot_every_records},
      {"log_level", log_level},
  };
  std::stringstream out;
  out << t << "\n";
  return out.str();
}

Controller::Options ControllerConfig::controller_options() const {
  Controller::Options o;
  o.data_dir = data_dir;
  o.heartbeat_interval = std::chrono::milliseconds(heartbeat_interval_ms);
  o.heartbeat_timeout = std::chrono::milliseconds(heartbeat_timeout_ms);
  o.probe_attempts = static_cast<int>(probe_attempts);
  o.lease = std::chrono::milliseconds(lease_ms);
  o.isolation_percent = static_cast<int>(isolation_percent);
  o.push_retry_initial = std::chrono::milliseconds(push_retry_initial_ms);
  o.push_retry_max = std::chrono::milliseconds(push_retry_max_ms);
  o.snapshot_every_records = static_cast<std::uint64_t>(snapshot_every_records);
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
  return o;
}

}  // namespace catena::control
