#include "catenad_config.hpp"

#include <catena/chain/limits.hpp>
#include <catena/control/address.hpp>
#include <catena/control/tenants.hpp>
#include <catena/control/toml_config.hpp>
#include <catena/control/validation.hpp>

namespace catena::catenad {
namespace {

control::TextRule host_port(bool allow_port_zero) {
  return [allow_port_zero](std::string_view s) -> std::string {
    auto r = control::parse_host_port(s, allow_port_zero);
    return r ? std::string() : r.error().message;
  };
}

control::TextRule optional_host_port() {
  return [](std::string_view s) -> std::string {
    if (s.empty()) return {};
    auto r = control::parse_host_port(s, /*allow_port_zero=*/true);
    return r ? std::string() : r.error().message;
  };
}

control::TextRule address_list() {
  return [](std::string_view s) -> std::string {
    auto r = control::parse_address_list(s);
    return r ? std::string() : r.error().message;
  };
}

control::TextRule not_empty() {
  return [](std::string_view s) -> std::string { return s.empty() ? "must not be empty" : ""; };
}

// The controller refuses other ids at registration; refusing them here
// saves a node that would retry its registration forever.
control::TextRule node_id() {
  return [](std::string_view s) -> std::string {
    if (s.empty()) return {};
    auto r = control::validate_name("node id", s, chain::limits::kMaxNodeIdLength);
    return r ? std::string() : r.error().message;
  };
}

control::TextRule token_file() {
  return [](std::string_view s) -> std::string {
    if (s.empty()) return {};
    auto r = control::read_token_file(std::string(s));
    return r ? std::string() : r.error().message;
  };
}

const control::TomlSchema<Config>& schema() {
  static const control::TomlSchema<Config> s = [] {
    namespace limits = chain::limits;
    control::TomlSchema<Config> k;
    k.text("node.id", &Config::node_id, node_id())
        .text("node.zone", &Config::zone)
        .text("node.datacenter", &Config::datacenter)
        .boolean("node.join_rebalance", &Config::join_rebalance)
        .text("controller.address", &Config::controller, address_list())
        .text("controller.token_file", &Config::controller_token_file, token_file())
        .text("admin.listen", &Config::admin_listen, host_port(true))
        .text("metrics.listen", &Config::metrics_listen, optional_host_port())
        .text("fabric.provider", &Config::provider, not_empty())
        .text("fabric.listen", &Config::fabric_listen)
        .integer("fabric.link_stall_ms", &Config::link_stall_ms, 500, 3'600'000)
        .integer("storage.segment_slots", &Config::slots, limits::kMinSegmentSlots, limits::kMaxSegmentSlots)
        .integer("storage.grace_ms", &Config::grace_ms, 0, std::int64_t{1} << 31)
        .integer("storage.segment_linger_ms", &Config::segment_linger_ms, 0, 3'600'000)
        .text("storage.keep_dir", &Config::keep_dir)
        .integer("storage.segment_memory_mb", &Config::segment_memory_mb, 0, std::int64_t{1} << 30)
        .integer("storage.min_segment_kb", &Config::min_segment_kb, 0, limits::kMaxSegmentBytes >> 10)
        .integer("limits.session_memory_mb", &Config::session_memory_mb, 1, std::int64_t{1} << 24)
        .integer("cpu.pin_data_plane", &Config::pin_cpu, -1, 4095)
        .text("log.level", &Config::log_level, control::log_level_rule());
    return k;
  }();
  return s;
}

}  // namespace

control::Result<void> apply_toml(std::string_view text, std::string_view source, Config& config) {
  return schema().apply(text, source, config);
}

control::Result<void> apply_toml_file(const std::filesystem::path& path, Config& config) {
  return schema().apply_file(path, config);
}

control::Result<void> validate(const Config& config) {
  if (auto r = schema().check(config, "flags and environment"); !r) return r;
  // Kept memory is found again by the node's id: an id the controller
  // assigns is another one after a restart.
  if (!config.keep_dir.empty() && config.node_id.empty()) {
    return control::make_error(control::idl::ErrorCode::INVALID_ARGUMENT,
                               "storage.keep_dir needs node.id (--node-id): kept memory belongs to one node");
  }
  return {};
}

std::string to_toml(const Config& config) {
  return schema().to_toml(config);
}

}  // namespace catena::catenad
